/*
 * handoff.pml — the hand-off: a retry or dead-letter copy is published and
 * confirmed before the original is acknowledged (docs/design.md §4.4,
 * "Settlement order"; §14.1 explains this model).
 *
 * Stands for: lily.(*Consumer).fetchLoop and decide (consumer.go,
 * process.go), lily.(*Consumer).settleBatch (settle.go) and the RabbitMQ
 * transport's Settle, handOff, settleOriginals and receipt.held
 * (transport/rabbitmq/settle.go). Every transport's Settle keeps the same
 * order (§4.4); RabbitMQ's is modelled because its receipts can go void
 * while the process lives on (a channel that died).
 *
 * Bounds: 2 consumers (prefetch 1), 3 messages, delivery_limit 3, FAULTS
 * environment faults — a process crash, a channel that dies under a live
 * process, a copy the broker nacks or leaves unconfirmed — each possible at
 * every step of every consumer.
 *
 * The Go test (models_test.go) reads the lines below that start with
 * "check:" and "mutant:".
 *
 * check: noloss
 * check: noinvent
 * check: done
 * mutant: ACK_BEFORE_CONFIRM noloss
 * mutant: IGNORE_NACK noloss
 * mutant: NO_HELD_CHECK noinvent
 * mutant: NO_RELEASE done
 */

#define N 3        /* messages */
#define C 2        /* consumers */
#define LIMIT 3    /* delivery_limit */
#ifndef FAULTS
#define FAULTS 2
#endif

#define READY 0    /* where[m]: ready in the source queue */
#define GONE  9    /* where[m]: the original was acknowledged */
                   /* where[m] = c+1: unacknowledged, held by consumer c */

/* phase[c]: how far consumer c's settlement of its message got */
#define IDLE      0
#define HELD      1  /* received and decided, no copy published */
#define CONFIRMED 2  /* its copy was confirmed, the original not yet acked */
#define FAILED    3  /* its copy was nacked or not confirmed (it may have landed) */

byte where[N];
byte count[N];       /* the broker's delivery count: hand-outs so far */
byte copies[N];      /* copies that landed at the hand-off target (bucket or DLQ) */
bool acked[N];       /* the handler succeeded and the original was acknowledged */
bool ambiguous[N];   /* a settlement was ambiguous: a duplicate is allowed (§4.4) */
bool crashed[C];     /* consumer c's process died; it restarts */
bool void_[C];       /* consumer c's channel died: its receipts are void */
byte phase[C];
byte held[C];        /* the message consumer c holds (when phase[c] != IDLE) */
byte faults = FAULTS;

#define alive(m) (where[m] != GONE || copies[m] > 0 || acked[m])
#define single(m) (ambiguous[m] || copies[m] + acked[m] <= 1)
#define settled(m) (where[m] == GONE)

/* No loss: every message is in the source queue, at the target or acked. */
ltl noloss { [] (alive(0) && alive(1) && alive(2)) }
/* No invention: one copy or one ack per message, unless a settlement was
 * ambiguous (confirm lost, channel died after the copy was confirmed). */
ltl noinvent { [] (single(0) && single(1) && single(2)) }
/* Liveness: every original is settled in the end, under every schedule
 * (no fairness assumed: each loop spends the fault budget or progresses). */
ltl done { <> (settled(0) && settled(1) && settled(2)) }

/* The broker takes back what consumer c held (RabbitMQ requeues a dead
 * channel's unacknowledged messages; the count rises at the next hand-out).
 * A copy already at the target makes the settlement ambiguous (§4.4: a
 * duplicate is possible, a loss is not). */
inline requeue(c) {
	if
	:: phase[c] != IDLE && where[held[c]] == c+1 ->
		where[held[c]] = READY;
		if
		:: phase[c] == CONFIRMED -> ambiguous[held[c]] = true
		:: else
		fi
	:: else
	fi
}

/* The environment: a crash or a dead channel, at any step of any consumer. */
active proctype chaos() {
end_chaos:
	do
	:: atomic {
		faults > 0 -> faults--;
		if
		:: crashed[0] = true; requeue(0)     /* consumer 0's process dies */
		:: crashed[1] = true; requeue(1)
		:: void_[0] = true; requeue(0)       /* consumer 0's channel dies */
		:: void_[1] = true; requeue(1)
		fi }
	od
}

/* publish: transport/rabbitmq publish of the copy (mandatory, confirm
 * mode), then phase[c] says how it went. A nack lands nothing; a copy whose
 * confirm never came may have landed (ambiguous). Both are faults. */
inline publish(m) {
	if
	:: copies[m]++; phase[c] = CONFIRMED
	:: faults > 0 -> faults--; phase[c] = FAILED                                    /* nacked */
	:: faults > 0 -> faults--; copies[m]++; ambiguous[m] = true; phase[c] = FAILED  /* confirm lost */
	fi
}

/* settleOriginals: acknowledge the original; a dead channel fails it (the
 * broker has requeued the original already). */
inline ackOriginal(m) {
	if
	:: !void_[c] -> where[m] = GONE
	:: else
	fi
}

proctype consumer(byte c) {
	byte m;
	bool handoff;
restart:
	atomic { crashed[c] = false; void_[c] = false; phase[c] = IDLE; held[c] = 0; m = 0; handoff = false }
	{
end_receive:
	do
	:: /* fetchLoop: transport Receive hands out a ready message (a new
	    * channel after a dead one); decide: over delivery_limit it is
	    * dead-lettered without the handler, else the handler acks or fails
	    * (a retry or a dead letter: both are hand-offs). */
		atomic {
			if
			:: where[0] == READY -> m = 0
			:: where[1] == READY -> m = 1
			:: where[2] == READY -> m = 2
			fi;
			void_[c] = false;
			where[m] = c+1; held[c] = m; phase[c] = HELD;
			if :: count[m] < LIMIT+1 -> count[m]++ :: else fi;
			if
			:: count[m] > LIMIT -> handoff = true
			:: else ->
				if
				:: handoff = false
				:: handoff = true
				fi
			fi
		}
		if
		:: !handoff ->
			/* settleBatch -> Settle -> settleOriginals: Ack */
			atomic {
				ackOriginal(m);
				if :: !void_[c] -> acked[m] = true :: else fi;
				phase[c] = IDLE; held[c] = 0; m = 0
			}
		:: handoff ->
#ifdef ACK_BEFORE_CONFIRM
			/* BUG: the original acknowledged before its copy is confirmed */
			atomic { ackOriginal(m); phase[c] = CONFIRMED }
			atomic { publish(m); phase[c] = IDLE; held[c] = 0; m = 0; handoff = false }
#else
			/* Settle: receipt.held() — a void receipt fails with
			 * ErrLeaseLost: no copy and no release (the broker redelivers).
			 * Otherwise handOff and publish the copy, wait for its confirm. */
			atomic {
				if
#ifdef NO_HELD_CHECK
				:: true -> publish(m)     /* BUG: a copy made from a void receipt */
#else
				:: void_[c] -> phase[c] = IDLE; held[c] = 0; m = 0; handoff = false
				:: else -> publish(m)
#endif
				fi
			}
#ifdef IGNORE_NACK
			atomic { phase[c] == FAILED -> phase[c] = CONFIRMED }   /* BUG: a nack taken as a confirm */
#endif
			atomic {
				if
				:: phase[c] == CONFIRMED ->
					/* settleOriginals: ack once the copy is confirmed */
					ackOriginal(m)
				:: phase[c] == FAILED ->
					/* settleBatch: a failed hand-off (EventSettleFailed)
					 * releases the original, unless the lease was lost. */
#ifdef NO_RELEASE
					skip                  /* BUG: the original stays unacknowledged */
#else
					if :: !void_[c] -> where[m] = READY :: else fi
#endif
				:: phase[c] == IDLE
				fi;
				phase[c] = IDLE; held[c] = 0; m = 0; handoff = false
			}
#endif
		fi
	od
	} unless { crashed[c] };
	goto restart
}

init {
	atomic {
		run consumer(0);
		run consumer(1)
	}
}
