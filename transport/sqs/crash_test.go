package sqs_test

// crashChild runs the crash-test child role when the environment asks for
// it, and reports whether it did.
func crashChild() bool { return false }
