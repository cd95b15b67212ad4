package evidence

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// SystemLambda: an AWS Lambda asynchronous invocation's on-failure
// destination — the JSON record Lambda sends to an SQS queue (or SNS topic,
// EventBridge bus, function) when an event's retries are exhausted or it
// grew too old. Lily's ingest of such a queue ([[foreign_dlq]] kind =
// "lambda-destination") keeps the original event (requestPayload) as the
// body and writes the record's context as HeaderLambda* headers.
const SystemLambda = "lambda"

// The headers of a Lambda on-failure record. A redrive leaves them out.
const (
	// HeaderLambdaPrefix starts every HeaderLambda* name.
	HeaderLambdaPrefix = "x-lily-lambda-"
	// HeaderLambdaCondition is requestContext.condition: RetriesExhausted
	// or EventAgeExceeded.
	HeaderLambdaCondition = "x-lily-lambda-condition"
	// HeaderLambdaFunctionArn is requestContext.functionArn (with the
	// version or alias that failed).
	HeaderLambdaFunctionArn = "x-lily-lambda-function-arn"
	// HeaderLambdaRequestID is requestContext.requestId: the invocation's
	// ID, the dead letter's event ID.
	HeaderLambdaRequestID = "x-lily-lambda-request-id"
	// HeaderLambdaInvokeCount is requestContext.approximateInvokeCount.
	HeaderLambdaInvokeCount = "x-lily-lambda-invoke-count"
	// HeaderLambdaStatusCode, HeaderLambdaFunctionError and
	// HeaderLambdaExecutedVersion are responseContext's statusCode,
	// functionError ("Handled", "Unhandled") and executedVersion.
	HeaderLambdaStatusCode      = "x-lily-lambda-status-code"
	HeaderLambdaFunctionError   = "x-lily-lambda-function-error"
	HeaderLambdaExecutedVersion = "x-lily-lambda-executed-version"
	// HeaderLambdaErrorType and HeaderLambdaErrorMessage are the
	// responsePayload's errorType and errorMessage, when it has them.
	HeaderLambdaErrorType    = "x-lily-lambda-error-type"
	HeaderLambdaErrorMessage = "x-lily-lambda-error-message"
	// HeaderLambdaTimestamp is the record's timestamp (RFC 3339): when
	// Lambda gave up.
	HeaderLambdaTimestamp = "x-lily-lambda-timestamp"
)

// Values of requestContext.condition.
const (
	LambdaRetriesExhausted = "RetriesExhausted"
	LambdaEventAgeExceeded = "EventAgeExceeded"
)

// LambdaRecord is an on-failure destination record of a Lambda
// asynchronous invocation, as Lambda writes it.
type LambdaRecord struct {
	Version        string `json:"version"`
	Timestamp      string `json:"timestamp"`
	RequestContext struct {
		RequestID              string `json:"requestId"`
		FunctionArn            string `json:"functionArn"`
		Condition              string `json:"condition"`
		ApproximateInvokeCount int    `json:"approximateInvokeCount"`
	} `json:"requestContext"`
	// RequestPayload is the original event, as the function received it.
	RequestPayload  json.RawMessage `json:"requestPayload"`
	ResponseContext struct {
		StatusCode      int    `json:"statusCode"`
		ExecutedVersion string `json:"executedVersion"`
		FunctionError   string `json:"functionError"`
	} `json:"responseContext"`
	// ResponsePayload is what the function returned (its error object).
	ResponsePayload json.RawMessage `json:"responsePayload"`
}

// DecodeLambdaRecord reads a Lambda on-failure destination record from a
// message body: ok is false when body is not one (no requestContext with
// a condition, or no requestPayload).
func DecodeLambdaRecord(body []byte) (LambdaRecord, bool) {
	var r LambdaRecord
	if err := json.Unmarshal(body, &r); err != nil || r.RequestContext.Condition == "" || len(r.RequestPayload) == 0 {
		return LambdaRecord{}, false
	}
	return r, true
}

// Payload is the original event's bytes: the requestPayload as Lambda
// wrote it (a JSON string's text when the event was a string).
func (r LambdaRecord) Payload() []byte {
	p := bytes.TrimSpace(r.RequestPayload)
	var s string
	if len(p) > 0 && p[0] == '"' && json.Unmarshal(p, &s) == nil {
		return []byte(s)
	}
	return append([]byte(nil), p...)
}

// Headers returns the record's context as HeaderLambda* headers (text).
func (r LambdaRecord) Headers() map[string]any {
	h := map[string]any{
		HeaderLambdaCondition:   r.RequestContext.Condition,
		HeaderLambdaFunctionArn: r.RequestContext.FunctionArn,
		HeaderLambdaRequestID:   r.RequestContext.RequestID,
		HeaderLambdaInvokeCount: strconv.Itoa(r.RequestContext.ApproximateInvokeCount),
		HeaderLambdaStatusCode:  strconv.Itoa(r.ResponseContext.StatusCode),
		HeaderLambdaTimestamp:   r.Timestamp,
	}
	if r.ResponseContext.FunctionError != "" {
		h[HeaderLambdaFunctionError] = r.ResponseContext.FunctionError
	}
	if r.ResponseContext.ExecutedVersion != "" {
		h[HeaderLambdaExecutedVersion] = r.ResponseContext.ExecutedVersion
	}
	var resp struct {
		ErrorType    string `json:"errorType"`
		ErrorMessage string `json:"errorMessage"`
	}
	if json.Unmarshal(r.ResponsePayload, &resp) == nil {
		if resp.ErrorType != "" {
			h[HeaderLambdaErrorType] = resp.ErrorType
		}
		if resp.ErrorMessage != "" {
			h[HeaderLambdaErrorMessage] = resp.ErrorMessage
		}
	}
	return h
}

// decodeLambda reads the HeaderLambda* headers of an on-failure record.
func decodeLambda(v *view) (ForeignEvidence, bool) {
	cond := v.text(HeaderLambdaCondition)
	if cond == "" {
		return ForeignEvidence{}, false
	}
	e := ForeignEvidence{
		System:        SystemLambda,
		Origin:        HeaderLambdaPrefix + "*",
		Reason:        cond,
		Source:        v.text(HeaderLambdaFunctionArn),
		ExceptionType: v.text(HeaderLambdaErrorType),
		Message:       v.text(HeaderLambdaErrorMessage),
		Consumer:      v.text(HeaderLambdaExecutedVersion),
		Raw:           v.raw(HeaderLambdaPrefix),
	}
	if e.Message == "" {
		if fe := v.text(HeaderLambdaFunctionError); fe != "" {
			e.Message = "function error: " + fe
		}
	}
	if n, err := strconv.Atoi(v.text(HeaderLambdaInvokeCount)); err == nil {
		e.Count = n
	}
	if ts, err := time.Parse(time.RFC3339Nano, v.text(HeaderLambdaTimestamp)); err == nil {
		e.Time = ts.UTC()
	}
	return e, true
}

// lambdaReason maps an on-failure record's condition to a Lily reason:
// RetriesExhausted → delivery_limit, EventAgeExceeded → expired.
func lambdaReason(v *view) (Reason, bool) {
	switch v.text(HeaderLambdaCondition) {
	case LambdaRetriesExhausted:
		return ReasonDeliveryLimit, true
	case LambdaEventAgeExceeded:
		return ReasonExpired, true
	}
	return "", false
}
