/*
 * redrivejob.pml — a redrive job run by two `lily serve` replicas: claim
 * under a lease, renew before every batch, publish, then mark the entries
 * and record the progress in one transaction (docs/design.md §9.3, §9.4;
 * §14.3 explains this model).
 *
 * Stands for redrive.(*Redriver).ClaimJob (redrive/jobs.go: one
 * conditional UPDATE), startJob, jobRun.check (the lease renewal before
 * each batch), endJob (redrive/jobrun.go), Redrive's selection after the
 * cursor and redriveBatch → Publish → markState → markStateTx → jobRun.record
 * (redrive/redrive.go: the entries marked WHERE state = 'pending', the
 * job's sent count and cursor in the same transaction). A publisher in
 * the catalog's own transaction (redriveTx) is the atomic case and needs no
 * model.
 *
 * Bounds: 2 runners, 1 job of 3 entries, batches of 1 entry, FAULTS faults:
 * a runner killed at any step (it restarts and looks for a job again), or a
 * runner stalled past its lease (a pause: the lease runs out while it is
 * mid-batch). A dead runner's lease runs out by itself.
 *
 * check: once
 * check: confirmed
 * check: nodup
 * check: complete
 * check: done
 * mutant: NO_PENDING_GUARD once
 * mutant: MARK_FIRST confirmed
 * mutant: NO_LEASE_CHECK nodup
 * mutant: CURSOR_FIRST complete
 * mutant: NO_TAKEOVER done
 */

#define R 2          /* runners */
#define E 3          /* entries 1..E, in ID order */
#ifndef FAULTS
#define FAULTS 3
#endif

/* the job's state */
#define QUEUED  0
#define RUNNING 1
#define DONE    2

/* a runner's phase */
#define IDLE     0   /* RunJobs: looking for a job to claim */
#define CLAIMED  1   /* ClaimJob took it; startJob not yet run */
#define RUN      2   /* between batches */
#define SELECTED 3   /* Redrive selected entry sel[r] after its cursor */
#define CHECKED  4   /* jobRun.check renewed the lease */
#define SENT     5   /* Publish confirmed entry sel[r] */
#define ADVANCED 6   /* CURSOR_FIRST only: the cursor recorded before the publish */

byte jstate = QUEUED;
byte holder;         /* 0: none; r+1: runner r */
bool lease;          /* lease_until is still ahead of now */
byte cursor;         /* after_id: the last entry the job handled */
bool redriven[E+1];  /* the entry's state: pending or redriven */
byte published[E+1]; /* copies of the entry's message the transport confirmed */
byte marks[E+1];     /* times the entry's state was changed by the redrive */
bool dupok[E+1];     /* a duplicate publish the design accepts (one batch in flight) */
byte phase[R], sel[R], cur[R];
byte faults = FAULTS;

#define allRedriven (redriven[1] && redriven[2] && redriven[3])

/* An entry changes state at most once in this redrive generation. */
ltl once { [] (marks[1] <= 1 && marks[2] <= 1 && marks[3] <= 1) }
/* An entry is marked redriven only after its message was confirmed. */
ltl confirmed { [] ((!redriven[1] || published[1] > 0) && (!redriven[2] || published[2] > 0) && (!redriven[3] || published[3] > 0)) }
/* A message is published twice only for the one batch in flight when its
 * runner was killed or stalled past its lease. */
ltl nodup { [] ((published[1] <= 1 || dupok[1]) && (published[2] <= 1 || dupok[2]) && (published[3] <= 1 || dupok[3])) }
/* A job ends done only with every entry of its selection redriven. */
ltl complete { [] (jstate != DONE || allRedriven) }
/* Liveness: the job ends, done. */
ltl done { <> (jstate == DONE) }

/* The one batch in flight of runner r: what a duplicate may come from. */
inline inflight(r) {
	if
	:: phase[r] == SELECTED || phase[r] == CHECKED || phase[r] == SENT || phase[r] == ADVANCED -> dupok[sel[r]] = true
	:: else
	fi
}

/* The environment: a runner killed at any step (its lease left to run
 * out), a runner stalled past its lease, and the lease of a job whose
 * holder runs nothing any more running out. */
active proctype env() {
	byte r;
end:
	do
	:: atomic { faults > 0 ->
		faults--;
		if :: r = 0 :: r = 1 fi;
		inflight(r);
		phase[r] = IDLE; sel[r] = 0; cur[r] = 0; r = 0 }
	:: atomic { faults > 0 && lease && holder > 0 && phase[holder-1] != IDLE ->
		faults--; inflight(holder-1); lease = false }
	:: atomic { lease && holder > 0 && phase[holder-1] == IDLE -> lease = false }
	od
}

proctype runner(byte r) {
end:
	do
	/* ClaimJob: UPDATE ... SET holder, lease_until WHERE state is active
	 * AND lease_until < now — one statement, so two runners never both win. */
	:: atomic { phase[r] == IDLE &&
#if defined(NO_LEASE_CHECK)
		jstate != DONE && holder != r+1 ->        /* BUG: claimed without the lease check */
#elif defined(NO_TAKEOVER)
		jstate == QUEUED && !lease ->             /* BUG: an orphaned running job is never taken over */
#else
		jstate != DONE && !lease ->
#endif
		holder = r+1; lease = true; cur[r] = cursor; phase[r] = CLAIMED }
	/* startJob: queued → running WHERE holder = r; a resumed job: check. */
	:: atomic { phase[r] == CLAIMED ->
		if
		:: holder == r+1 && jstate != DONE -> jstate = RUNNING; lease = true; phase[r] = RUN
		:: else -> phase[r] = IDLE; cur[r] = 0             /* ErrJobLeaseLost */
		fi }
	/* Redrive selects the next pending entry after the cursor; none left:
	 * endJob marks the job done WHERE holder = r and the job is active. */
	:: atomic { phase[r] == RUN ->
		if
		:: cur[r] < 1 && !redriven[1] -> sel[r] = 1; phase[r] = SELECTED
		:: else if
			:: cur[r] < 2 && !redriven[2] -> sel[r] = 2; phase[r] = SELECTED
			:: else if
				:: cur[r] < 3 && !redriven[3] -> sel[r] = 3; phase[r] = SELECTED
				:: else ->
					if :: holder == r+1 && jstate != DONE -> jstate = DONE; holder = 0; lease = false :: else fi;
					phase[r] = IDLE; cur[r] = 0
				fi
			fi
		fi }
	/* jobRun.check: renew the lease WHERE holder = r and the job is active
	 * (it renews an expired lease nobody took); otherwise the run stops. */
	:: atomic { phase[r] == SELECTED ->
		if
		:: holder == r+1 && jstate != DONE -> lease = true;
#ifdef CURSOR_FIRST
			cursor = sel[r]; phase[r] = ADVANCED          /* BUG: progress recorded before the batch is sent */
#else
			phase[r] = CHECKED
#endif
		:: else -> phase[r] = IDLE; sel[r] = 0; cur[r] = 0
		fi }
#ifdef CURSOR_FIRST
	:: atomic { phase[r] == ADVANCED -> phase[r] = CHECKED }
#endif
#ifdef MARK_FIRST
	/* BUG: the entry marked (and the progress recorded) before the publish */
	:: atomic { phase[r] == CHECKED ->
		if :: !redriven[sel[r]] -> redriven[sel[r]] = true; marks[sel[r]]++ :: else fi;
		if :: cursor < sel[r] -> cursor = sel[r] :: else fi;
		phase[r] = SENT }
	:: atomic { phase[r] == SENT -> published[sel[r]]++; cur[r] = sel[r]; sel[r] = 0; phase[r] = RUN }
#else
	/* redriveBatch → Publish: the transport confirmed the batch. */
	:: atomic { phase[r] == CHECKED -> published[sel[r]]++; phase[r] = SENT }
	/* markState → markStateTx → jobRun.record, one transaction: the entry
	 * marked redriven WHERE state = 'pending', the sent count and the
	 * cursor recorded, the lease renewed if still held. */
	:: atomic { phase[r] == SENT ->
#ifdef NO_PENDING_GUARD
		redriven[sel[r]] = true; marks[sel[r]]++;           /* BUG: no WHERE state = 'pending' */
#else
		if :: !redriven[sel[r]] -> redriven[sel[r]] = true; marks[sel[r]]++ :: else fi;
#endif
		if :: cursor < sel[r] -> cursor = sel[r] :: else fi;
		if :: holder == r+1 -> lease = true :: else fi;
		cur[r] = sel[r]; sel[r] = 0; phase[r] = RUN }
#endif
	od
}

init {
	atomic {
		run runner(0);
		run runner(1)
	}
}
