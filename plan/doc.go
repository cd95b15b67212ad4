// Package plan is Lily's retry-policy planner (docs/design.md §10): pure
// functions that turn a retry policy and a few measured rates into the
// numbers an operator needs to choose retry limits, and an SVG chart
// writer to show them.
//
// The formulas come from the worked example "choosing retry limits for a
// payments consumer" of the seed article 000 (2,000 messages/s, 50 ms
// handlers, a 10-minute ledger outage, 1 poison message in 100,000) and from
// the threshold experiment of the seed article 003 (20 messages, thresholds
// 1, 2, 3, 5 and 8):
//
//   - Outage: healthy messages dead-lettered by a dependency outage that is
//     longer than the retry span.
//   - Independent: healthy messages dead-lettered when every attempt fails
//     independently with probability p.
//   - Poison: the cost of a poison message with and without a limit, and the
//     healthy load's concurrency by Little's law.
//   - Partition: how long a poison record stalls a partition of a log with
//     blocking retries, and with non-blocking retry topics.
//   - Thresholds: the threshold sweep over a distribution of "attempts
//     needed".
//
// "Attempts" always means total attempts: the first processing plus the
// retries. A Lily queue with retry_attempts A makes A+1 attempts.
//
// Every result is computed exactly on the decimal values of the inputs (a
// float64 input is taken at its shortest decimal representation, a
// time.Duration as a whole number of nanoseconds) and rounded to float64
// once, so that the worked examples come out exactly: 2000/s × 86,400 s ×
// 0.01³ is 172.8, not 172.80000000000004.
package plan
