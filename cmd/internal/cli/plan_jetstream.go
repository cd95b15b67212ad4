package cli

import (
	"bytes"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/plan"
)

func newPlanJetStreamCmd() *cobra.Command {
	var (
		sf       planScheduleFlags
		o        planOutput
		p        plan.JetStreamParams
		discard  string
		payloads int64
	)
	cmd := &cobra.Command{
		Use:   "jetstream",
		Short: "JetStream's numbers: redeliveries, MaxAckPending in an outage, message size, how long dead letters stay",
		Long: `What a NATS JetStream consumer and its dead-letter stream do with failures
(docs/nats.md). Every input is optional; give those you know.

  lease                 = BackOff[0] if --backoff is set (it replaces AckWait), else --ack-wait
  wait after delivery n = BackOff[min(n−1, len−1)], else AckWait; the server gives a
                          message up after --max-deliver deliveries (for a Lily queue: its delivery_limit)
  ack pending needed    = rate · (min(outage, retry span) + handler_time): every message
                          waiting out a NakWithDelay holds a MaxAckPending slot
  dead letter stored    = message bytes + subject + 34 bytes (counted by MaxBytes)
  stream full after     = min(max_msgs / dead-letter rate, max_bytes / (rate · stored))
  a dead letter stays   = max_age with --dlq-discard new (a full stream refuses new ones),
                          else the first of max_age and full-after

The retry schedule (Lily's NakWithDelay delays) is given as in the other modes
(--attempts with --interval or --backoff-millis, --delays, --delays-millis) and
counts only with --outage. The chart plots when an unacknowledged message is
delivered again.`,
		Example: `  lily plan jetstream --max-deliver 5 --backoff 1s,5s,30s --handler-time 50ms
  lily plan jetstream --rate 2000 --outage 10m --attempts 5 --backoff-millis 30000 --max-backoff-millis 240000 --max-ack-pending 20000
  lily plan jetstream --dead-letter-rate 0.02 --message-bytes 2048 --dlq-subject lily.dlq.orders.created --dlq-max-msgs 10000 --dlq-discard new`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check("jetstream"); err != nil {
				return err
			}
			f := cmd.Flags()
			if f.Changed("interval") || f.Changed("backoff-millis") || f.Changed("max-backoff-millis") || f.Changed("delays") || f.Changed("delays-millis") {
				sch, err := sf.schedule(cmd)
				if err != nil {
					return err
				}
				p.Retries = sch
			}
			if f.Changed("outage") != (len(p.Retries.Delays) > 0) {
				return usagef("plan jetstream: --outage and the retry delays go together: the messages an outage leaves waiting out a NAK delay need both")
			}
			switch discard {
			case "old":
			case "new":
				p.DLQDiscardNew = true
			default:
				return usagef("plan jetstream: --dlq-discard %q: use \"new\" (refuse when full; Lily's dead-letter streams) or \"old\" (remove the oldest)", discard)
			}
			p.MaxPayload = payloads
			r, err := plan.JetStream(p)
			if err != nil {
				return planUsage("jetstream", err)
			}
			return o.emit(cmd, r, func(b *bytes.Buffer) { printJetStream(b, p, r) }, r.Chart)
		},
	}
	f := cmd.Flags()
	f.Float64Var(&p.Rate, "rate", 0, "arrival rate at the consumer, messages per second (with --outage)")
	f.IntVar(&p.MaxDeliver, "max-deliver", -1, "the consumer's MaxDeliver; for a Lily queue its delivery_limit (-1: unlimited)")
	planDurationFlag(f, &p.AckWait, "ack-wait", "the consumer's AckWait (default 30s)")
	f.Var(planDurationListValue{&p.BackOff}, "backoff", "the consumer's BackOff, e.g. 1s,5s,30s")
	planDurationFlag(f, &p.HandlerTime, "handler-time", "handler time of a healthy message, e.g. 50ms")
	f.IntVar(&p.MaxAckPending, "max-ack-pending", 0, "the consumer's MaxAckPending (default the server's 1000; Lily declares 20000; -1: unlimited)")
	planDurationFlag(f, &p.Outage, "outage", "a dependency outage during which every attempt fails, e.g. 10m (with the retry delays)")
	sf.add(f)
	f.Int64Var(&p.MessageBytes, "message-bytes", 0, "a message's size, headers included")
	f.Int64Var(&payloads, "max-payload", plan.JetStreamDefaultMaxPayload, "the server's max_payload in bytes")
	f.Float64Var(&p.DeadLetterRate, "dead-letter-rate", 0, "dead letters per second into the dead-letter stream")
	f.StringVar(&p.DLQSubject, "dlq-subject", "", "the dead-letter stream's subject, e.g. lily.dlq.orders.created")
	planDurationFlag(f, &p.DLQMaxAge, "dlq-max-age", "the dead-letter stream's MaxAge, e.g. 168h (default none)")
	f.Int64Var(&p.DLQMaxMsgs, "dlq-max-msgs", 0, "the dead-letter stream's MaxMsgs (Lily: dlq_max_length; default none)")
	f.Int64Var(&p.DLQMaxBytes, "dlq-max-bytes", 0, "the dead-letter stream's MaxBytes (default none)")
	f.StringVar(&discard, "dlq-discard", "new", `the dead-letter stream's discard policy: "new" (Lily's) or "old"`)
	o.add(f)
	return cmd
}

func printJetStream(b *bytes.Buffer, p plan.JetStreamParams, r plan.JetStreamResult) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	lease := "AckWait"
	if len(p.BackOff) > 0 {
		lease = "BackOff[0], which replaces AckWait"
	}
	fmt.Fprintf(tw, "lease of a delivery\t%s s\t%s\n", planNum(r.LeaseS), lease)
	if r.HandlerOutlivesLease {
		fmt.Fprintf(tw, "  handler outlives it\t%s\tdelivered again while it runs unless the consumer sends InProgress (Lily does)\n", p.HandlerTime)
	}
	fmt.Fprintf(tw, "waits of an unacked message\t%s\tafter each delivery\n", planDelaysText(r.RedeliveryWaitsS))
	if r.PoisonDeadLetteredAfterS != nil {
		fmt.Fprintf(tw, "poison given up after\t%s\t%d deliveries (MAX_DELIVERIES advisory; Lily dead-letters it)\n", planSecs(*r.PoisonDeadLetteredAfterS), p.MaxDeliver)
	} else {
		fmt.Fprintf(tw, "poison given up\tnever\tno MaxDeliver: the last wait repeats forever\n")
	}
	if r.BackOffRefused {
		fmt.Fprintf(tw, "  refused by the server\t\tMaxDeliver %d is not above the %d BackOff entries: raise --max-deliver\n", p.MaxDeliver, len(p.BackOff))
	}
	mp := planNum(float64(r.MaxAckPending))
	if r.MaxAckPending < 0 {
		mp = "unlimited"
	}
	fmt.Fprintf(tw, "MaxAckPending\t%s\t\n", mp)
	if r.AckPendingNeeded != nil {
		fmt.Fprintf(tw, "  needed in the %s outage\t%s\trate × (min(outage, span %s) + handler time)\n", p.Outage, planNum(*r.AckPendingNeeded), p.Retries.Span())
	}
	if r.AckPendingFullAfterS != nil {
		fmt.Fprintf(tw, "  full after\t%s\tthen no new message is handed out until a delayed one settles\n", planSecs(*r.AckPendingFullAfterS))
	}
	fmt.Fprintf(tw, "max payload\t%s bytes\theaders included\n", planNum(float64(r.MaxPayload)))
	if r.PayloadHeadroomBytes != nil {
		fmt.Fprintf(tw, "  headroom\t%s bytes\twhat the evidence headers of a dead-letter copy may add\n", planNum(float64(*r.PayloadHeadroomBytes)))
		fmt.Fprintf(tw, "dead letter stored\t%s bytes\tmessage + subject + 34\n", planNum(float64(r.DLQStoredBytes)))
	}
	if r.DLQFullAfterS != nil {
		what := "then the oldest are removed"
		if r.DLQRefusesNew {
			what = "then new dead letters are refused: how long the drain ('lily serve') may stop"
		}
		fmt.Fprintf(tw, "dead-letter stream full after\t%s\t%s\n", planSecs(*r.DLQFullAfterS), what)
	}
	if r.DeadLetterStaysS != nil {
		fmt.Fprintf(tw, "a dead letter stays\t%s\tlimited by %s\n", planSecs(*r.DeadLetterStaysS), r.DLQLimitedBy)
	} else {
		fmt.Fprintf(tw, "a dead letter stays\tuntil removed\tno limit removes it\n")
	}
	_ = tw.Flush()
}
