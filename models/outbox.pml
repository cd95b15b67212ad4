/*
 * outbox.pml — the outbox relay: rows published through a transport and
 * marked published_at only after the confirm, heads of keys locked across
 * the publish and the mark (docs/inbox.md "Relay"; docs/design.md §14.4
 * explains this model).
 *
 * Stands for outbox.(*Relay).RunOnce on PostgreSQL (one transaction per
 * round), round → take (the due heads FOR UPDATE SKIP LOCKED, the rows
 * behind them FOR UPDATE), publish (a first attempt as one publish per
 * queue; a group with a row that failed before one row per publish,
 * stopping at the first failure), send (lily.Publish, waits for the
 * confirm) and mark (published_at for the confirmed rows, attempts and
 * next_attempt_at for the failed ones), then the commit (outbox/relay.go).
 *
 * Bounds: 2 relays on one database, 3 rows (rows 1 and 2 of one key, row 3
 * of another), FAULTS faults: a relay killed at any step — between the
 * confirm and the commit of the marks too: its transaction rolls back and
 * its locks go with its connection — or a publish refused (a nack, a
 * return, a confirm timeout; of a batch, the broker may have taken a part).
 * A failed row's backoff runs out by itself.
 *
 * check: confirmed
 * check: order
 * check: nodup
 * check: done
 * mutant: MARK_FIRST confirmed
 * mutant: NO_BREAK order
 * mutant: SQLITE_TWO_RELAYS nodup
 * mutant: NO_RETRY done
 * limit: ANY_SUBSET order
 */

#define RL 2        /* relays */
#ifndef FAULTS
#define FAULTS 3
#endif

/* a row in a relay's round */
#define NONE   0    /* not in the round */
#define TAKEN  1    /* selected (and locked) */
#define OK     2    /* its publish was confirmed */
#define FAILED 3    /* its publish failed */

bool marked[4];     /* published_at is set (committed) */
bool retried[4];    /* attempts > 0: it failed before */
bool due[4];        /* next_attempt_at <= now */
byte lock[4];       /* 0: free; r+1: locked by relay r's transaction */
byte published[4];  /* copies of the row's message the broker took */
bool dupok[4];      /* a second copy the design accepts */
byte rs[RL*4];      /* rs[r*4+i]: row i in relay r's round */
bool earlyMark[4];  /* MARK_FIRST only: the mark committed, the publish to come */
byte faults = FAULTS;
bool started;
hidden byte cut;    /* scratch: the broker refused a row of the batch */
/* Of a refused batch the broker took a prefix (in order: a queue that
 * refuses a message refuses the ones after it); ANY_SUBSET lets it take
 * any rows, as a full queue that made room mid-batch can (§14.4). */
#ifdef ANY_SUBSET
#define ANYCUT false
#else
#define ANYCUT true
#endif

#define ROW(r, i) rs[(r)*4 + (i)]
#define key(i) ((i) == 3 -> 1 : 0)
/* row i is the head of its key: the oldest unmarked row of the key */
#define head(i) (!marked[i] && ((i) != 2 || marked[1]))

ltl confirmed { [] ((!marked[1] || published[1] > 0) && (!marked[2] || published[2] > 0) && (!marked[3] || published[3] > 0)) }
ltl order { [] (published[2] == 0 || published[1] > 0) }
ltl nodup { [] ((published[1] <= 1 || dupok[1]) && (published[2] <= 1 || dupok[2]) && (published[3] <= 1 || dupok[3])) }
ltl done { <> (started && marked[1] && marked[2] && marked[3]) }

/* take: a due head nobody locks (SKIP LOCKED), and the unmarked rows
 * behind it (FOR UPDATE). */
inline take(r) {
	for (i : 1 .. 3) {
		if
#ifdef SQLITE_TWO_RELAYS
		:: head(i) && due[i] ->                 /* BUG: no row locks (two SQLite relays on one file) */
#else
		:: head(i) && due[i] && lock[i] == 0 ->
			lock[i] = r+1;
#endif
			ROW(r, i) = TAKEN;
			if
			:: i == 1 && !marked[2] -> ROW(r, 2) = TAKEN;
#ifndef SQLITE_TWO_RELAYS
				lock[2] = r+1
#endif
			:: else
			fi
		:: else
		fi
	}
	i = 0
}

/* The round's transaction ends: a commit applies the marks (mark), a kill
 * rolls it back; either way its locks are released. */
inline endRound(r, commit) {
	for (i : 1 .. 3) {
		if
		:: commit && ROW(r, i) == OK -> marked[i] = true
		:: commit && ROW(r, i) == FAILED -> retried[i] = true;
			due[i] = false                      /* next_attempt_at after the backoff */
		:: !commit && ROW(r, i) == OK -> dupok[i] = true   /* confirmed, mark rolled back */
		:: else
		fi;
		if :: lock[i] == r+1 -> lock[i] = 0 :: else fi;
		ROW(r, i) = NONE
	}
	i = 0
}

#define inRound(r) (ROW(r,1) != NONE || ROW(r,2) != NONE || ROW(r,3) != NONE)
#define anyRetried(r) ((ROW(r,1) != NONE && retried[1]) || (ROW(r,2) != NONE && retried[2]) || (ROW(r,3) != NONE && retried[3]))
#define allTaken(r) (ROW(r,1) != OK && ROW(r,1) != FAILED && ROW(r,2) != OK && ROW(r,2) != FAILED && ROW(r,3) != OK && ROW(r,3) != FAILED)
#define firstTaken(r, i) (ROW(r, i) == TAKEN && (i == 1 || ROW(r, 1) != TAKEN) && (i <= 2 || ROW(r, 2) != TAKEN))
#define anyFailed(r) (ROW(r,1) == FAILED || ROW(r,2) == FAILED || ROW(r,3) == FAILED)

proctype relay(byte r) {
	byte i;
end:
	do
	/* RunOnce: begin, take. */
	:: atomic { !inRound(r) && ((head(1) && due[1] && lock[1] == 0) || (head(2) && due[2] && lock[2] == 0) ||
		(head(3) && due[3] && lock[3] == 0)) -> take(r) }
#ifdef MARK_FIRST
	/* BUG: the marks committed before the publish */
	:: atomic { inRound(r) && allTaken(r) && !earlyMark[1] && !earlyMark[2] && !earlyMark[3] ->
		for (i : 1 .. 3) { if :: ROW(r, i) == TAKEN -> marked[i] = true; earlyMark[i] = true :: else fi }; i = 0 }
	:: atomic { inRound(r) && (earlyMark[1] || earlyMark[2] || earlyMark[3]) ->
		for (i : 1 .. 3) { if :: ROW(r, i) == TAKEN -> published[i]++; earlyMark[i] = false; ROW(r, i) = NONE :: else fi;
			if :: lock[i] == r+1 -> lock[i] = 0 :: else fi }; i = 0 }
#else
	/* publish, a first attempt: the whole group in one publish; a refused
	 * publish fails every row of it, while the broker may have taken a
	 * prefix of the batch (those copies are the accepted duplicates; see
	 * ANY_SUBSET for a broker that takes rows after a refused one). */
	:: atomic { inRound(r) && allTaken(r) && !anyRetried(r) ->
		if
		:: for (i : 1 .. 3) { if :: ROW(r, i) == TAKEN -> published[i]++; ROW(r, i) = OK :: else fi }
		:: faults > 0 -> faults--;
			cut = false;
			for (i : 1 .. 3) {
				if
				:: ROW(r, i) == TAKEN ->
					if
					:: !cut -> published[i]++; dupok[i] = true   /* taken, its confirm lost with the batch */
					:: true -> cut = ANYCUT                       /* refused */
					fi;
					ROW(r, i) = FAILED
				:: else
				fi
			}
		fi; i = 0; cut = false }
	/* publish, a group with a row that failed before: one row per publish,
	 * in ID order; the first failure stops the group for this round. */
	:: atomic { inRound(r) && anyRetried(r) && !anyFailed(r) && (firstTaken(r, 1) || firstTaken(r, 2) || firstTaken(r, 3)) ->
		if :: firstTaken(r, 1) -> i = 1 :: firstTaken(r, 2) -> i = 2 :: firstTaken(r, 3) -> i = 3 fi;
		if
		:: published[i]++; ROW(r, i) = OK
		:: faults > 0 -> faults--; ROW(r, i) = FAILED
		fi; i = 0 }
#ifdef NO_BREAK
	/* BUG: the group goes on after a failure */
	:: atomic { inRound(r) && anyRetried(r) && anyFailed(r) && (firstTaken(r, 1) || firstTaken(r, 2) || firstTaken(r, 3)) ->
		if :: firstTaken(r, 1) -> i = 1 :: firstTaken(r, 2) -> i = 2 :: firstTaken(r, 3) -> i = 3 fi;
		published[i]++; ROW(r, i) = OK; i = 0 }
#endif
	/* mark and commit: once every row of the round is confirmed, failed,
	 * or left behind a failure. */
	:: atomic { inRound(r) && !allTaken(r) &&
		(anyFailed(r) || !(ROW(r,1) == TAKEN || ROW(r,2) == TAKEN || ROW(r,3) == TAKEN)) ->
		endRound(r, true) }
#endif
	/* The environment kills the relay at any step of its round. */
	:: atomic { faults > 0 && inRound(r) -> faults--; endRound(r, false) }
	od
}

/* Time passes: a failed row's backoff runs out. */
active proctype clock() {
end:
	do
#ifndef NO_RETRY
	:: atomic { !due[1] && !marked[1] -> due[1] = true }
	:: atomic { !due[2] && !marked[2] -> due[2] = true }
	:: atomic { !due[3] && !marked[3] -> due[3] = true }
#else
	:: false                                    /* BUG: a failed row is never due again */
#endif
	od
}

init {
	atomic {
		due[1] = true; due[2] = true; due[3] = true;
		started = true;
		run relay(0);
		run relay(1)
	}
}
