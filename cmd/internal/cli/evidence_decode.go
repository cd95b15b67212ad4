package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/transport"
)

func init() { register(newEvidenceCmd) }

func newEvidenceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "evidence",
		Short: "Work with dead-letter evidence headers",
	}
	cmd.AddCommand(newEvidenceDecodeCmd())
	return cmd
}

func newEvidenceDecodeCmd() *cobra.Command {
	var asJSON, typed bool
	cmd := &cobra.Command{
		Use:   "decode < headers.json",
		Short: "Decode Lily's and foreign dead-letter evidence from a JSON object of headers on stdin",
		Long: `Read one JSON object of message headers on stdin and print the evidence Lily
finds in it: Lily's own (x-lily-*, with every problem such as a non-canonical
x-retry-count), and foreign evidence: RabbitMQ x-death and x-first/last-death-*,
MassTransit MT-Fault-* and MT-Reason, Spring Kafka kafka_dlt-*, Kafka Connect
__connect.errors.*, Kafka Streams __streams.errors.*, NServiceBus
NServiceBus.ExceptionInfo.*, NServiceBus.FailedQ and NServiceBus.TimeOfFailure,
Google Pub/Sub's dead-letter policy CloudPubSubDeadLetterSource* (subscription,
delivery count, publish time).

JSON numbers become integers when they are whole (so x-retry-count 3 is
canonical, "3" is not), objects become tables and arrays lists. With --typed,
stdin is Lily's typed header encoding (each value {"s": ...}, {"i32": ...},
...), which keeps the exact AMQP types.

  echo '{"x-death":[{"reason":"rejected","queue":"orders","count":3}]}' | lily evidence decode`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := io.ReadAll(cmd.InOrStdin())
			if err != nil {
				return err
			}
			h, err := readHeaders(data, typed)
			if err != nil {
				return usagef("evidence decode: stdin: %v", err)
			}
			d := decodeEvidence(h)
			if asJSON {
				return report.JSON(cmd.OutOrStdout(), d)
			}
			printEvidence(cmd.OutOrStdout(), d, "  ")
			return nil
		},
	}
	jsonFlag(cmd.Flags(), &asJSON, "")
	cmd.Flags().BoolVar(&typed, "typed", false, "stdin is Lily's typed header encoding (as stored in the catalog)")
	return cmd
}

// readHeaders parses a JSON object of headers: plain JSON, or with typed
// Lily's typed encoding.
func readHeaders(data []byte, typed bool) (transport.Headers, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, errNotJSONObject
	}
	if typed {
		h, err := transport.UnmarshalHeaders(data)
		if err != nil {
			return nil, fmt.Errorf("%w (with --typed every value is an object such as {\"s\": \"text\"} or {\"i32\": 3})", err)
		}
		return h, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%v: %w", err, errNotJSONObject)
	}
	if dec.More() {
		return nil, fmt.Errorf("more than one JSON value: %w", errNotJSONObject)
	}
	return plainHeaders(m).(map[string]any), nil
}

// plainHeaders converts decoded JSON into header values: whole numbers to
// int64, other numbers to float64, objects to tables, arrays to lists.
func plainHeaders(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, err := x.Float64()
		if err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<63 {
			return int64(f)
		}
		return f
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = plainHeaders(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plainHeaders(e)
		}
		return out
	}
	return v
}
