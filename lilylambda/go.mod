module github.com/lily-mq/lily/lilylambda

go 1.26.8

require github.com/lily-mq/lily v0.0.0-00010101000000-000000000000

require (
	github.com/aws/aws-lambda-go v1.55.1
	github.com/aws/aws-sdk-go-v2 v1.48.0
	github.com/aws/aws-sdk-go-v2/service/sqs v1.53.0
	github.com/lily-mq/lily/transport/sqs v0.0.0-00010101000000-000000000000
)

require (
	github.com/Admiral-Piett/goaws v0.4.5 // indirect
	github.com/aws/aws-sdk-go-v2/internal/configsources v1.5.12 // indirect
	github.com/aws/aws-sdk-go-v2/internal/endpoints/v2 v2.8.12 // indirect
	github.com/aws/smithy-go v1.28.9 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/gorilla/mux v1.8.0 // indirect
	github.com/sirupsen/logrus v1.9.0 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

// Development: the workspace (go.work) uses the modules of this repository;
// outside it these replaces do the same.
replace github.com/lily-mq/lily => ..

replace github.com/lily-mq/lily/transport/sqs => ../transport/sqs
