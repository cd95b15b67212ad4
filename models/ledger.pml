/*
 * ledger.pml — the ledger's counts: accepted at first receipt, acked
 * before the broker ack, dead letters counted in the broker's DLQ and then
 * as catalog entries, discard and redrive moving them between columns
 * (docs/design.md §9.6; §14.5 explains this model).
 *
 * Stands for ledger.Accounted on a broker transport: Receive →
 * countOrHold (accepted, once per message identity through the per-event
 * rows; a batch held while the catalog cannot count), Settle (acked
 * counted, once per identity, before the wrapped transport's ack; a
 * failure fails the settlement and settleBatch releases the original),
 * Ledger.catalogRows (pending entries dead-lettered, discarded ones
 * discarded, redriven ones neither) with the broker's DeadLetterCounter and
 * InFlight (ledger/accounted.go, accounted_hold.go, ledger.go); ingest
 * (catalog commit, then the DLQ ack; a stored entry is not stored again);
 * discard and redrive (catalog, redrive). lost = accepted − acked −
 * dead_lettered − discarded − in_flight.
 *
 * The hand-off (a retry or dead-letter copy confirmed, then the original
 * acked) and a redrive's publish-and-mark are single steps here: their
 * crashes are §14.1's and §14.3's.
 *
 * Bounds: 2 consumers, 3 messages, each retried at most once and
 * redriven at most once, FAULTS faults: a consumer killed at any step, an
 * ingest killed between its commit and its DLQ ack, the catalog down.
 *
 * check: noalarm
 * check: balance
 * check: done
 * mutant: ACK_FIRST noalarm
 * mutant: NO_DEDUP noalarm
 * mutant: INGEST_NO_DEDUP balance
 * mutant: DROP_HELD done
 * limit: STRICT balance
 */

#define N 3
#define C 2
#ifndef FAULTS
#define FAULTS 1
#endif

/* loc[m]: the message's copy in the source queue */
#define GONE  0   /* none: acked, or handed off to a bucket or the DLQ */
#define READY 1
#define HELD  2   /* received by the transport, not yet counted or handed out */
#define RUN   3   /* counted accepted, with a handler */
#define ACKED 4   /* acked counted, the broker ack to follow */
/* cp[m]: a hand-off copy */
#define NOCP   0
#define BUCKET 1
#define DLQ    2
/* ent[m]: its latest catalog entry */
#define NOENT     0
#define PENDING   1
#define DISCARDED 2
#define REDRIVEN  3

byte loc[N], cp[N], ent[N];
byte acc[N];         /* accepted counted (per-event rows: at most 1) */
bool ackRow[N];      /* acked counted */
byte extra[N];       /* INGEST_NO_DEDUP only: entries stored twice */
bool retried[N], redriven[N], ingesting[N];
bool stored[N];      /* ingest stored this DLQ copy's entry (its DLKey) */
bool twice[N];       /* acked counted, then dead-lettered on a redelivery */
byte by[C];          /* the message consumer c works on, +1; 0: idle */
bool catdown;
byte faults = FAULTS;
bool started;

#define V(e) (e)   /* a comparison is 0 or 1 */
#define inflight(m) (V(loc[m] == READY || loc[m] == HELD || loc[m] == RUN || loc[m] == ACKED) + V(cp[m] == BUCKET))
#define deadl(m) (V(ent[m] == PENDING) + extra[m] + V(cp[m] == DLQ))
#define lostm(m) (acc[m] - V(ackRow[m]) - deadl(m) - V(ent[m] == DISCARDED) - inflight(m))
#define lost (lostm(0) + lostm(1) + lostm(2))
#define rest(m) (loc[m] == GONE && cp[m] == NOCP)
#define atRest (started && rest(0) && rest(1) && rest(2) && by[0] == 0 && by[1] == 0)
#ifdef STRICT
#define exempt false
#else
#define exempt (twice[0] || twice[1] || twice[2])
#endif

/* The ledger never shows a loss that did not happen (lost > 0). */
ltl noalarm { [] (lost <= 0) }
/* At rest it balances, but for a message acked-counted and later
 * dead-lettered (counted twice: §14.5's accepted limit). */
ltl balance { [] (!atRest || lost == 0 || exempt) }
/* Liveness: everything ends acked or in the catalog — under every
 * schedule: the model has no loop that does not spend a bounded budget,
 * so it needs no fairness. */
ltl done { <> atRest }

inline count(x) {
#ifdef NO_DEDUP
	acc[x]++                                    /* BUG: no per-event row */
#else
	acc[x] = 1
#endif
}

proctype consumer(byte c) {
	byte m;
end:
	do
	/* Receive → countOrHold: the transport hands out a ready message and
	 * accepted is counted once per identity before a handler gets it; with
	 * the catalog down the batch is held, unacknowledged, and counted on a
	 * later fetch. */
	:: atomic { by[c] == 0 && (loc[0] == READY || loc[1] == READY || loc[2] == READY) ->
		if :: loc[0] == READY -> m = 0 :: loc[1] == READY -> m = 1 :: loc[2] == READY -> m = 2 fi;
		by[c] = m+1;
		if
		:: catdown -> loc[m] = HELD
		:: else -> count(m); loc[m] = RUN
		fi; m = 0 }
	:: atomic { by[c] > 0 && loc[by[c]-1] == HELD && !catdown -> count(by[c]-1); loc[by[c]-1] = RUN }
#ifdef DROP_HELD
	:: atomic { by[c] > 0 && loc[by[c]-1] == HELD && catdown -> by[c] = 0 }   /* BUG: the held batch forgotten */
#endif
	/* Settle an Ack: count acked (before the broker ack); the catalog
	 * down fails the settlement and the original is released. */
	:: atomic { by[c] > 0 && loc[by[c]-1] == RUN ->
		if
		:: !catdown ->
#ifdef ACK_FIRST
			loc[by[c]-1] = ACKED                /* BUG: the broker ack first, counted next */
#else
			ackRow[by[c]-1] = true; loc[by[c]-1] = ACKED
#endif
		:: catdown -> loc[by[c]-1] = READY; by[c] = 0
		fi }
	:: atomic { by[c] > 0 && loc[by[c]-1] == ACKED ->
#ifdef ACK_FIRST
		ackRow[by[c]-1] = true;
#endif
		loc[by[c]-1] = GONE; by[c] = 0 }
	/* A retry: the bucket copy confirmed, then the original acked (one
	 * step here, §14.1). Not counted: the copy is in flight. */
	:: atomic { by[c] > 0 && loc[by[c]-1] == RUN && !retried[by[c]-1] ->
		cp[by[c]-1] = BUCKET; retried[by[c]-1] = true; loc[by[c]-1] = GONE; by[c] = 0 }
	/* A dead letter: the DLQ copy confirmed, then the original acked. */
	:: atomic { by[c] > 0 && loc[by[c]-1] == RUN ->
		cp[by[c]-1] = DLQ; twice[by[c]-1] = ackRow[by[c]-1]; loc[by[c]-1] = GONE; by[c] = 0 }
	/* The consumer's process is killed at any step: the broker redelivers
	 * what it held. */
	:: atomic { by[c] > 0 && faults > 0 ->
		faults--;
		if
		:: loc[by[c]-1] == ACKED ->
#ifdef ACK_FIRST
			loc[by[c]-1] = GONE                 /* acked at the broker, never counted */
#else
			loc[by[c]-1] = READY                /* counted, not acked: lost < 0 until redelivered */
#endif
		:: loc[by[c]-1] == HELD || loc[by[c]-1] == RUN -> loc[by[c]-1] = READY
		:: else
		fi;
		by[c] = 0 }
	od
}

/* The broker's buckets, lily serve's ingest, the operator and the catalog. */
active proctype env() {
	byte m;
end:
	do
	/* A retry copy's delay ends: it is ready in the queue again. */
	:: atomic { cp[0] == BUCKET || cp[1] == BUCKET || cp[2] == BUCKET ->
		if :: cp[0] == BUCKET -> m = 0 :: cp[1] == BUCKET -> m = 1 :: cp[2] == BUCKET -> m = 2 fi;
		cp[m] = NOCP; loc[m] = READY; m = 0 }
	/* ingest: the DLQ message stored in the catalog (committed; the same
	 * dead letter is not stored twice), then the DLQ ack. */
	:: atomic { !catdown && ((cp[0] == DLQ && !ingesting[0]) || (cp[1] == DLQ && !ingesting[1]) || (cp[2] == DLQ && !ingesting[2])) ->
		if
		:: cp[0] == DLQ && !ingesting[0] -> m = 0
		:: cp[1] == DLQ && !ingesting[1] -> m = 1
		:: cp[2] == DLQ && !ingesting[2] -> m = 2
		fi;
		if
		:: ent[m] == PENDING && stored[m] ->
#ifdef INGEST_NO_DEDUP
			extra[m]++                          /* BUG: stored again */
#else
			skip
#endif
		:: else -> ent[m] = PENDING; stored[m] = true
		fi;
		ingesting[m] = true; m = 0 }
	:: atomic { ingesting[0] || ingesting[1] || ingesting[2] ->
		if :: ingesting[0] -> m = 0 :: ingesting[1] -> m = 1 :: ingesting[2] -> m = 2 fi;
		if
		:: cp[m] = NOCP; stored[m] = false      /* the DLQ ack */
		:: faults > 0 -> faults--               /* killed between the commit and the ack */
		fi;
		ingesting[m] = false; m = 0 }
	/* The operator discards a pending entry, or redrives it (once). */
	:: atomic { !catdown && (ent[0] == PENDING || ent[1] == PENDING || ent[2] == PENDING) && cp[0] != DLQ && cp[1] != DLQ && cp[2] != DLQ ->
		if :: ent[0] == PENDING -> m = 0 :: ent[1] == PENDING -> m = 1 :: ent[2] == PENDING -> m = 2 fi;
		if
		:: ent[m] = DISCARDED
		:: !redriven[m] -> ent[m] = REDRIVEN; redriven[m] = true; loc[m] = READY
		fi; m = 0 }
	/* The catalog goes down, and comes back. */
	:: atomic { faults > 0 && !catdown -> faults--; catdown = true }
	:: atomic { catdown -> catdown = false }
	od
}

init {
	atomic {
		loc[0] = READY; loc[1] = READY; loc[2] = READY;
		started = true;
		run consumer(0);
		run consumer(1)
	}
}
