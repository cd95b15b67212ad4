package lily

import "errors"

// CrashedError reports that the process that handled a delivery died
// before it answered: a handler outside Go (the 'lily consume' sidecar's
// command killed by a signal, its HTTP endpoint resetting the connection).
// The runtime does what a broker does when a consumer process dies: the
// delivery is released for redelivery, which raises its delivery count, so
// a message that keeps killing its handler is dead-lettered with reason
// delivery_limit once it is over the queue's delivery_limit — counted
// outside the handler, never retried through a bucket (a retry would reset
// the count and let a crash-type poison loop). Create it with Crashed;
// detect it with errors.As.
type CrashedError struct {
	Err error
}

// Crashed wraps err as a crash of the handler's process. Crashed(nil)
// returns nil.
func Crashed(err error) error {
	if err == nil {
		return nil
	}
	return &CrashedError{Err: err}
}

func (e *CrashedError) Error() string { return "crashed: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *CrashedError) Unwrap() error { return e.Err }

// isCrash reports whether err is (or wraps) a CrashedError.
func isCrash(err error) bool {
	var c *CrashedError
	return errors.As(err, &c)
}
