package lily

import (
	"fmt"
	"slices"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// stampSchemaVersion writes m.SchemaVersion into a copy of m's headers.
func stampSchemaVersion(m *Message) error {
	if m.SchemaVersion == 0 {
		return nil
	}
	if m.SchemaVersion < 0 || m.SchemaVersion > evidence.MaxSchemaVersion {
		return fmt.Errorf("SchemaVersion %d: must be in 1..%d (0: none)", m.SchemaVersion, evidence.MaxSchemaVersion)
	}
	if raw, ok := m.Headers[evidence.HeaderSchemaVersion]; ok {
		if v, _ := evidence.SchemaVersion(m.Headers); v != m.SchemaVersion {
			return fmt.Errorf("SchemaVersion %d, but header %s is %s: set one of the two, or make them agree",
				m.SchemaVersion, evidence.HeaderSchemaVersion, evidence.FormatRaw(raw))
		}
	}
	h := transport.CloneHeaders(m.Headers)
	if h == nil {
		h = transport.Headers{}
	}
	evidence.SetSchemaVersion(h, m.SchemaVersion)
	m.Headers = h
	return nil
}

// validateSchemaVersions checks schema_versions.
func (c QueueConfig) validateSchemaVersions() []error {
	var errs []error
	for i, v := range c.SchemaVersions {
		if v < 1 || v > evidence.MaxSchemaVersion {
			errs = append(errs, fmt.Errorf("%w: queue %q: schema_versions = %v: version %d is %d: must be in 1..%d",
				ErrInvalidConfig, c.Name, c.SchemaVersions, i+1, v, evidence.MaxSchemaVersion))
		}
		if slices.Index(c.SchemaVersions, v) != i {
			errs = append(errs, fmt.Errorf("%w: queue %q: schema_versions = %v: %d is listed twice",
				ErrInvalidConfig, c.Name, c.SchemaVersions, v))
		}
	}
	return errs
}
