/*
 * giveback.pml — a crash-type poison among competing consumers: cautious
 * mode and the give-back of redeliveries with their carried count
 * x-lily-prior-deliveries (docs/design.md §4.6, §7.5; §14.2 explains this
 * model).
 *
 * Stands for the RabbitMQ transport's Receive (the cautious window: take,
 * stop, start with prefetch 1, a redelivery handed out alone "after the
 * window"), consumer.spill and Transport.giveBack (transport/rabbitmq/
 * consume.go, unreceive.go), deliveryCount = broker count + carried count
 * (codec.go), evidence.CarriedDeliveries (evidence/headers.go), and the
 * runtime's fetchLoop/waitIdle (consumer.go) and decide (process.go: over
 * delivery_limit → dead-letter without the handler). SQS, Pub/Sub and
 * Kafka share groups give back the same way (§7.5).
 *
 * The poison kills its consumer's process whenever its handler runs; the
 * broker then requeues everything that process held, each hand-out counted.
 * Each consumer is one process whose every step is atomic, so every
 * interleaving of the two consumers' steps is explored.
 *
 * Bounds: 2 consumers (prefetch 2; 1 when cautious), 3 messages (message 0
 * the poison), delivery_limit 3, FAULTS more faults — a process killed at
 * any step, a give-back copy refused. A give-back's publish and its
 * original's ack are one step here: a crash between them is the hand-off's
 * (same publish, same settleOriginals), checked in handoff.pml — a
 * duplicate, never a loss.
 *
 * check: innocent
 * check: noreset
 * check: noraise
 * check: noloss
 * check: done
 * mutant: NO_SPILL innocent
 * mutant: NO_ISOLATE innocent
 * mutant: RESET_COUNT noreset
 * mutant: RAISE_COUNT noraise
 * mutant: ACK_FIRST noloss
 * mutant: NO_LIMIT done
 * limit: FAULTS=2 innocent
 */

#define N 3        /* messages; message m is in slot m */
#define C 2        /* consumers */
#define P 2        /* prefetch */
#ifndef LIMIT
#define LIMIT 3    /* delivery_limit */
#endif
#define POISON 0
#ifndef FAULTS
#define FAULTS 1
#endif
#define MAXC (LIMIT+FAULTS+3)   /* counts saturate here (reached by NO_LIMIT only) */

/* st[m]: where message m is */
#define FREE    0  /* gone: acked or dead-lettered */
#define READY   1  /* ready in the queue */
#define WIN     2  /* pushed into its holder's prefetch window, not yet read */
#define FRESH   3  /* read, a first delivery: handed to a handler */
#define RED     4  /* read, a redelivery: waits to be handed out alone */
#define ALONE   5  /* a redelivery handed out alone (nothing else runs) */
#define EXPOSED 6  /* a redelivery whose give-back failed: waits on the channel */
#define LIMBO   7  /* ACK_FIRST only: the original acked, its copy not yet published */

byte st[N], holder[N];
byte bc[N];        /* the broker's count of the message's current copy */
byte pr[N];        /* x-lily-prior-deliveries that copy carries */
bool cautious[C];  /* the consumer is in cautious mode (subscription prefetch 1) */
byte counted[N];   /* hand-outs of the message that counted (not given back) */
bool acked[N], dl[N];
bool raised, reset;
bool started;      /* the three messages are in the queue */
byte faults = FAULTS;
hidden byte s;     /* scratch, reset within each atomic step */

#define cnt(x) (bc[x] + pr[x])
#define held(c, x) (st[x] >= WIN && holder[x] == c)
#define H(c, x) (held(c, x) -> 1 : 0)
#define nheld(c) (H(c,0) + H(c,1) + H(c,2))
#define ANY(P, c) (P(c,0) || P(c,1) || P(c,2))
#define PICK(P, c) if :: P(c,0) -> s = 0 :: P(c,1) -> s = 1 :: P(c,2) -> s = 2 fi

#define isReady(c, x)   (st[x] == READY)
#define isWin(c, x)     (st[x] == WIN && holder[x] == c)
#define isFresh(c, x)   (st[x] == FRESH && holder[x] == c)
#define isRed(c, x)     (st[x] == RED && holder[x] == c)
#define isWaiting(c, x) ((st[x] == RED || st[x] == EXPOSED) && holder[x] == c)
#define isAlone(c, x)   (st[x] == ALONE && holder[x] == c)
#define isLimbo(c, x)   (st[x] == LIMBO && holder[x] == c)

#define live(m) (st[m] != FREE || acked[m] || dl[m])

/* An innocent message is never dead-lettered beside the poison. */
ltl innocent { [] (!dl[1] && !dl[2]) }
/* The count is never reset: a hand-out's count is at least one more than
 * the message's counted hand-outs before it. */
ltl noreset { [] !reset }
/* The count is never raised without a delivery: at most one more. */
ltl noraise { [] !raised }
/* No loss: each message is in the queue or held, or was acked or
 * dead-lettered. */
ltl noloss { [] (!started || (live(0) && live(1) && live(2))) }
/* Liveness: in the end every message is acked or dead-lettered. */
ltl done { <> (started && st[0] == FREE && st[1] == FREE && st[2] == FREE) }

/* The consumer's process dies: the broker requeues everything it held,
 * each hand-out counted (its count rises at the next hand-out). */
inline die(c) {
	for (s : 0 .. N-1) {
		if
		:: held(c, s) && st[s] == LIMBO -> st[s] = FREE; holder[s] = 0    /* ACK_FIRST: lost */
		:: held(c, s) && st[s] != LIMBO -> st[s] = READY; holder[s] = 0
		:: else
		fi
	}
	s = 0;
	cautious[c] = false
}

/* decide (process.go) and the handler: over delivery_limit the delivery is
 * dead-lettered without the handler (the hand-off is §14.1's); the poison
 * kills the process; an innocent message is acked. */
inline runHandler(c) {
	if
#ifndef NO_LIMIT
	:: cnt(s) > LIMIT -> dl[s] = true; st[s] = FREE; holder[s] = 0
#endif
	:: else ->
		if
		:: s == POISON -> die(c)
		:: else -> acked[s] = true; st[s] = FREE; holder[s] = 0
		fi
	fi
}

/* The give-back copy: CarriedDeliveries(count) = count − 1, the hand-out
 * given back (no handler saw it) not carried; its broker count starts
 * again. */
inline carry() {
#if defined(RESET_COUNT)
	pr[s] = 0;                      /* BUG: the count not carried */
#elif defined(RAISE_COUNT)
	pr[s] = cnt(s);                 /* BUG: the given-back hand-out carried too */
#else
	pr[s] = cnt(s) - 1;
#endif
	bc[s] = 0;
	counted[s]--                    /* the hand-out given back did not count */
}

/* Consumer c: each option of its loop is one atomic step of c, of the
 * broker towards c, or of the environment killing c. */
proctype consumer(byte c) {
end:
	do
	/* The broker pushes a ready message into c's window: up to prefetch 2,
	 * or 1 and only when it holds nothing while cautious (consume.go:
	 * start). The hand-out is counted; the count the consumer sees is the
	 * broker's plus the carried one (codec.go: deliveryCount). */
	:: atomic { ANY(isReady, c) && ((!cautious[c] && nheld(c) < P) || (cautious[c] && nheld(c) == 0)) ->
		PICK(isReady, c);
		st[s] = WIN; holder[s] = c;
		if :: bc[s] < MAXC -> bc[s]++ :: else fi;
		if :: cnt(s) > counted[s] + 1 -> raised = true :: else fi;
		if :: cnt(s) < counted[s] + 1 -> reset = true :: else fi;
		if :: counted[s] < MAXC -> counted[s]++ :: else fi;
		s = 0 }
	/* Receive takes a pushed delivery (consume.go: take): a redelivery
	 * (count > 1) waits to be handed out alone and stops the subscription
	 * (cautious); a first delivery goes to a handler and, with no
	 * redelivery waiting, ends cautious mode. */
	:: atomic { ANY(isWin, c) ->
		PICK(isWin, c);
#ifdef NO_ISOLATE
		st[s] = FRESH;                  /* BUG: a redelivery runs beside the others */
#else
		if
		:: cnt(s) > 1 -> st[s] = RED; cautious[c] = true
		:: else -> st[s] = FRESH;
			if :: !ANY(isWaiting, c) -> cautious[c] = false :: else fi
		fi;
#endif
		s = 0 }
	/* A handler runs a first delivery (fetchLoop → dispatch). */
	:: atomic { ANY(isFresh, c) -> PICK(isFresh, c); runHandler(c); s = 0 }
	/* After the window (nothing pushed unread, no handler running:
	 * fetchLoop's waitIdle), one waiting redelivery is handed out alone. */
	:: atomic { !ANY(isWin, c) && !ANY(isFresh, c) && !ANY(isAlone, c) && ANY(isWaiting, c) ->
		PICK(isWaiting, c); st[s] = ALONE; s = 0 }
	/* consume.go spill → unreceive.go giveBack: each other redelivery is
	 * republished to the queue (mandatory, confirmed) with its count
	 * carried, and its original acked (settleOriginals). A refused copy
	 * leaves it waiting on the channel (EXPOSED), never lost. */
	:: atomic { ANY(isAlone, c) && ANY(isRed, c) ->
		PICK(isRed, c);
#if defined(NO_SPILL)
		st[s] = EXPOSED                 /* BUG: left on the channel */
#elif defined(ACK_FIRST)
		st[s] = LIMBO                   /* BUG: the original acked before its copy is published */
#else
		if
		:: faults > 0 -> faults--; st[s] = EXPOSED     /* the copy was refused */
		:: true -> carry(); st[s] = READY; holder[s] = 0
		fi
#endif
		; s = 0 }
#ifdef ACK_FIRST
	:: atomic { ANY(isLimbo, c) -> PICK(isLimbo, c); carry(); st[s] = READY; holder[s] = 0; s = 0 }
#endif
	/* The redelivery handed out alone runs once the others are given
	 * back (or refused: they wait on the channel). */
	:: atomic { ANY(isAlone, c) && !ANY(isRed, c) && !ANY(isLimbo, c) ->
		PICK(isAlone, c); runHandler(c); s = 0 }
	/* The environment kills c's process at any step. */
	:: atomic { faults > 0 -> faults--; die(c) }
	od
}

init {
	atomic {
		st[0] = READY; st[1] = READY; st[2] = READY;
		started = true;
		run consumer(0);
		run consumer(1)
	}
}
