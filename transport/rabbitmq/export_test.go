package rabbitmq

// HeaderFrameSize exports headerFrameSize to the tests.
var HeaderFrameSize = headerFrameSize
