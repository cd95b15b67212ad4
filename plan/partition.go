package plan

import (
	"fmt"
	"math/big"
	"strconv"
	"time"
)

// PartitionParams describes poison records on a partitioned log (Kafka
// and the like), where a consumer cannot commit past a record it still
// retries.
type PartitionParams struct {
	// Schedule is the retry schedule of a poison record.
	Schedule Schedule
	// HandlerTime is how long one attempt of the record holds the consumer;
	// >= 0.
	HandlerTime time.Duration
	// ProduceTime is how long copying a failed record to a retry topic
	// takes (produce with acks=all), for non-blocking retries; >= 0.
	// Defaults to 0.
	ProduceTime time.Duration
	// PartitionRate is the records per second arriving on one partition;
	// >= 0.
	PartitionRate float64
	// PoisonPerDay is the poison records a day on the whole topic; >= 0.
	PoisonPerDay float64
	// Partitions is the number of partitions the poison spreads over; >= 1.
	Partitions int
}

// PartitionStall is what one poison record costs its partition.
type PartitionStall struct {
	// StallPerPoisonS is how long one poison record holds its partition,
	// in seconds.
	StallPerPoisonS float64 `json:"stall_per_poison_s"`
	// BacklogRecords is partition rate · stall: the records that pile up
	// behind the poison record, each delayed by up to the stall.
	BacklogRecords float64 `json:"backlog_records"`
	// StallsPerPartitionPerDay is poison per day / partitions.
	StallsPerPartitionPerDay float64 `json:"stalls_per_partition_per_day"`
	// LostPerPartitionPerDayS is stalls per day · stall: processing time
	// each partition loses a day, in seconds.
	LostPerPartitionPerDayS float64 `json:"lost_per_partition_per_day_s"`
}

// PartitionResult compares blocking retries, which hold the partition for
// the whole retry schedule, with non-blocking retry topics, which hold it
// for one handler run and one produce.
type PartitionResult struct {
	// Attempts is the total number of attempts of the schedule.
	Attempts int `json:"attempts"`
	// DelaysS are the delays between attempts, in seconds.
	DelaysS []float64 `json:"delays_s"`
	// HandlerTimeS is the handler time of one attempt in seconds.
	HandlerTimeS float64 `json:"handler_time_s"`
	// ProduceTimeS is the produce time in seconds.
	ProduceTimeS float64 `json:"produce_time_s"`
	// PartitionRate is the records per second on one partition.
	PartitionRate float64 `json:"partition_rate"`
	// PoisonPerDay is the poison records a day on the topic.
	PoisonPerDay float64 `json:"poison_per_day"`
	// Partitions is the number of partitions.
	Partitions int `json:"partitions"`
	// Blocking is the cost with blocking retries: stall = sum of the delays
	// + attempts · handler time.
	Blocking PartitionStall `json:"blocking"`
	// NonBlocking is the cost with non-blocking retry topics: stall =
	// handler time + produce time.
	NonBlocking PartitionStall `json:"non_blocking"`
}

// Partition returns what a poison record costs a partition (seed 000, "the
// same limit on a log"): with blocking retries of 1, 2, 4, 8 and 16 s (six
// attempts) and 50 ms handler runs, a poison record holds its partition
// 31 s + 6·0.05 s = 31.3 s; at 20 records/s per partition 20·31.3 = 626
// records pile up behind it; 1,728 poison records a day over 100 partitions
// stall each partition 17.28 times a day, losing 17.28·31.3 = 540.864 s,
// about 9 minutes, of processing. Non-blocking retry topics reduce the
// stall to one handler run and one produce.
func Partition(p PartitionParams) (PartitionResult, error) {
	if p.Schedule.Attempts != len(p.Schedule.Delays)+1 {
		return PartitionResult{}, inputErrorf("attempts", strconv.Itoa(p.Schedule.Attempts),
			"must be the number of delays plus one (%d)", len(p.Schedule.Delays)+1)
	}
	if err := checkDuration("handler-time", p.HandlerTime, false); err != nil {
		return PartitionResult{}, err
	}
	if err := checkDuration("produce-time", p.ProduceTime, false); err != nil {
		return PartitionResult{}, err
	}
	if err := checkRate("partition-rate", p.PartitionRate); err != nil {
		return PartitionResult{}, err
	}
	if err := checkRate("poison-per-day", p.PoisonPerDay); err != nil {
		return PartitionResult{}, err
	}
	if p.Partitions < 1 {
		return PartitionResult{}, inputErrorf("partitions", strconv.Itoa(p.Partitions), "must be an integer >= 1")
	}
	h := seconds(p.HandlerTime)
	blocking := add(p.Schedule.span(), mul(integer(int64(p.Schedule.Attempts)), h))
	nonBlocking := add(h, seconds(p.ProduceTime))
	return PartitionResult{
		Attempts:      p.Schedule.Attempts,
		DelaysS:       p.Schedule.delaysSeconds(),
		HandlerTimeS:  float(h),
		ProduceTimeS:  float(seconds(p.ProduceTime)),
		PartitionRate: p.PartitionRate,
		PoisonPerDay:  p.PoisonPerDay,
		Partitions:    p.Partitions,
		Blocking:      p.stall(blocking),
		NonBlocking:   p.stall(nonBlocking),
	}, nil
}

// stall returns the cost of a stall of s seconds per poison record.
func (p PartitionParams) stall(st *big.Rat) PartitionStall {
	perDay := quo(exact(p.PoisonPerDay), integer(int64(p.Partitions)))
	return PartitionStall{
		StallPerPoisonS:          float(st),
		BacklogRecords:           float(mul(exact(p.PartitionRate), st)),
		StallsPerPartitionPerDay: float(perDay),
		LostPerPartitionPerDayS:  float(mul(perDay, st)),
	}
}

// Chart returns the processing time each partition loses a day (y, in
// minutes) against the number of blocking retries (x): the result's
// schedule cut after 0, 1, 2, ... retries, with non-blocking retry topics
// beside it. The result's own schedule is marked.
func (r PartitionResult) Chart() Chart {
	h, prod := exact(r.HandlerTimeS), exact(r.ProduceTimeS)
	perDay := quo(exact(r.PoisonPerDay), integer(int64(r.Partitions)))
	sixty := integer(60)
	var blocking, nonBlocking []Point
	span := new(big.Rat)
	for n := 0; n <= len(r.DelaysS); n++ {
		if n > 0 {
			span.Add(span, exact(r.DelaysS[n-1]))
		}
		st := add(span, mul(integer(int64(n+1)), h))
		blocking = append(blocking, Point{X: float64(n), Y: float(quo(mul(perDay, st), sixty))})
		nonBlocking = append(nonBlocking, Point{X: float64(n), Y: float(quo(mul(perDay, add(h, prod)), sixty))})
	}
	lost := r.Blocking.LostPerPartitionPerDayS / 60
	return Chart{
		Title: "Processing time a partition loses to poison records",
		Subtitle: fmt.Sprintf("%s poison records a day over %d partitions, %s per handler run",
			fmtNumber(r.PoisonPerDay), r.Partitions, fmtSeconds(r.HandlerTimeS)),
		XLabel:   "retries of a poison record (the schedule's first n delays)",
		MarkName: "your schedule",
		YLabel:   "minutes lost per partition per day",
		Series: []Series{
			{Name: "blocking retries", Points: blocking},
			{Name: "non-blocking retry topics", Points: nonBlocking},
		},
		Marks: []Mark{{X: float64(len(r.DelaysS)), Y: blocking[len(blocking)-1].Y,
			Label: fmt.Sprintf("%d attempts: %s min a day", r.Attempts, fmtNumber(lost))}},
	}
}
