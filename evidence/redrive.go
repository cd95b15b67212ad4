package evidence

import "maps"

// RedriveHeaders returns the headers for redriving a dead letter to its source queue
// (docs/design.md §4, §9), as a new map; h is not modified.
//
// Every header of h is kept — event ID, key, type, schema version, traceparent, the
// application's own headers, foreign evidence — except:
//
//   - x-retry-count is reset to int32(0), canonical, whatever it was (a non-canonical
//     value that caused invalid_retry_count is replaced);
//   - x-lily-redrive-count becomes RedriveCount(h)+1, as int32;
//   - the evidence of the previous dead-lettering (EvidenceHeaders) and the attempt
//     history (HeaderAttempts) are removed: they are kept in the catalog, and a new
//     failure writes fresh evidence and starts a new history.
//
// Enforcing max_redrives is the caller's decision, made before calling RedriveHeaders.
func RedriveHeaders(h map[string]any) map[string]any {
	out := maps.Clone(h)
	if out == nil {
		out = make(map[string]any)
	}
	for _, k := range evidenceHeaders {
		delete(out, k)
	}
	delete(out, HeaderAttempts)
	SetRetryCount(out, 0)
	SetRedriveCount(out, RedriveCount(h)+1)
	return out
}

// ReleaseHeaders returns the headers for releasing a parked message back to its source
// queue (ordering "park" or "block"), as a new map; h is not modified.
//
// A parked message did not fail: it waited behind its key's head. So, unlike
// RedriveHeaders, it keeps x-retry-count, x-lily-redrive-count and the attempt history
// (HeaderAttempts) as they were; only the evidence of the diversion (EvidenceHeaders,
// reason "parked") is removed.
func ReleaseHeaders(h map[string]any) map[string]any {
	out := maps.Clone(h)
	if out == nil {
		out = make(map[string]any)
	}
	for _, k := range evidenceHeaders {
		delete(out, k)
	}
	return out
}
