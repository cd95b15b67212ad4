package evidence

// Headers a redrive adds to a message whose body an operator edited in the
// catalog (lily dlq edit): the message carries the latest version, and says
// so. Names are a wire contract.
const (
	// HeaderEditedBy is who stored the body version sent (the editor's
	// token name or --actor).
	HeaderEditedBy = "x-lily-edited-by"
	// HeaderEditedVersion is the body version sent (int32, >= 1; the
	// original, as dead-lettered, is version 0).
	HeaderEditedVersion = "x-lily-edited-version"
	// HeaderEditedSHA256 is the hex SHA-256 of the original body (version
	// 0), so that a consumer or an audit can tie the edited message to the
	// dead letter it came from.
	HeaderEditedSHA256 = "x-lily-edited-from-sha256"
)

// SetEdited marks h (redrive headers) as carrying body version version,
// stored by editor, of an original body whose hex SHA-256 is origSHA256.
func SetEdited(h map[string]any, editor string, version int, origSHA256 string) {
	h[HeaderEditedBy] = editor
	h[HeaderEditedVersion] = int32(version)
	h[HeaderEditedSHA256] = origSHA256
}
