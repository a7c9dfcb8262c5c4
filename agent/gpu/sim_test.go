package gpu

import (
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The swap simulation drives Decide itself (no goroutines, simulated time) over a
// stream of random jobs on one exclusive device, once with MaxExtraWait 0 (strict FIFO)
// and once with the configured bound, and compares model loads and waits.

type simJob struct {
	arrive time.Duration
	model  string
	run    time.Duration
	// approvalAt > 0: the job asks its owner for an approval this far into its run and
	// waits approvalWait for the answer (issue 32 item 1).
	approvalAt, approvalWait time.Duration
}

// Approval modes: how a job waiting for its owner's approval uses the device.
const (
	approvalsHold    = "hold"    // it keeps the device while it waits (before issue 32)
	approvalsRelease = "release" // it gives the device back and queues again after the answer
)

type simParams struct {
	seed          int64
	jobs          int
	meanGap       time.Duration // mean time between arrivals (exponential)
	minRun        time.Duration
	maxRun        time.Duration // uniform run time
	unload, load  time.Duration // swap cost
	models        []string
	weights       []float64
	maxExtraWaitM time.Duration
	// approvalShare of the jobs wait for an approval mid-run, for up to maxApproval
	// (uniform; Hermes's approvals.timeout in `make dev` is 5 min); approvals says how.
	approvalShare float64
	maxApproval   time.Duration
	approvals     string
}

func defaultSim(seed int64) simParams {
	return simParams{seed: seed, jobs: 1000, meanGap: 14 * time.Minute, minRun: time.Minute, maxRun: 15 * time.Minute,
		unload: 20 * time.Second, load: 2 * time.Minute, models: []string{"qwen-coder", "llama-70b", "gemma", "mistral"},
		weights: []float64{0.4, 0.3, 0.2, 0.1}, maxExtraWaitM: 30 * time.Minute}
}

// withApprovals is p with 30 % of the jobs waiting up to 5 min for an approval.
func (p simParams) withApprovals(mode string) simParams {
	p.approvalShare, p.maxApproval, p.approvals = 0.3, 5*time.Minute, mode
	return p
}

func (p simParams) generate() []simJob {
	rng := rand.New(rand.NewSource(p.seed))
	jobs := make([]simJob, p.jobs)
	var t time.Duration
	for i := range jobs {
		t += time.Duration(rng.ExpFloat64() * float64(p.meanGap))
		x, k := rng.Float64(), 0
		for k < len(p.weights)-1 && x >= p.weights[k] {
			x -= p.weights[k]
			k++
		}
		jobs[i] = simJob{arrive: t, model: p.models[k], run: p.minRun + time.Duration(rng.Int63n(int64(p.maxRun-p.minRun)))}
		// Drawn for every job (the same stream whatever the share): the job streams match.
		ask, at, wait := rng.Float64(), rng.Float64(), rng.Float64()
		if ask < p.approvalShare {
			jobs[i].approvalAt = time.Duration(float64(jobs[i].run) * (0.2 + 0.6*at))
			jobs[i].approvalWait = time.Duration(wait * float64(p.maxApproval))
		}
	}
	return jobs
}

type simResult struct {
	loads     int
	waits     []time.Duration // per job: first start - arrival, plus (released) re-acquire - answer
	worstWait time.Duration
	meanWait  time.Duration
	// lateOvertakes counts jobs started ahead of an older waiter that had already waited
	// the aging bound (the policy promises none).
	lateOvertakes int
	// orderMismatches counts grants Decide made of a waiter Order did not show first.
	orderMismatches int
	// shownOvertakes counts starts of a job ahead of one whose shown position was ahead of
	// it (at any moment both waited) that its card did not allow: the job queued after it
	// and it had already waited the aging bound (the cards promise none);
	// allowedOvertakes the ones its card allowed.
	shownOvertakes, allowedOvertakes int
	// deviceHeldWaiting is the device time held by jobs waiting for a person.
	deviceHeldWaiting time.Duration
}

// simulate runs jobs through Decide on an exclusive device. A job's second part (after
// an approval it waited for released) queues as waiter id len(jobs)+j.
func simulate(jobs []simJob, p simParams, maxExtra time.Duration) simResult {
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := State{Phase: PhaseIdle, Slots: 1, MaxExtraWait: maxExtra}
	n := len(jobs)
	var (
		now      time.Duration
		next     int                       // next job to arrive
		running  = map[int]time.Duration{} // waiter id → end
		phaseEnd time.Duration
		res      = simResult{waits: make([]time.Duration, n)}
		done     int
		since    = map[int]time.Duration{} // waiter id → when it joined the queue
		again    = map[int]time.Duration{} // job → when its answer comes (released)
		behind   = map[int]map[int]bool{}  // waiter id → waiters shown ahead of it
	)
	runOf := func(id int) time.Duration {
		j := jobs[id%n]
		switch {
		case id >= n:
			return j.run - j.approvalAt
		case j.approvalAt > 0 && p.approvals == approvalsRelease:
			return j.approvalAt
		case j.approvalAt > 0 && p.approvals == approvalsHold:
			return j.run + j.approvalWait
		}
		return j.run
	}
	join := func(id int, at time.Duration) {
		since[id] = at
		s.Waiting = append(s.Waiting, Waiter{ID: strconv.Itoa(id), Model: jobs[id%n].model, Since: epoch.Add(at)})
	}
	for done < n {
		for next < n && jobs[next].arrive <= now {
			join(next, jobs[next].arrive)
			next++
		}
		for j, at := range again {
			if at <= now {
				delete(again, j)
				join(n+j, at)
			}
		}
		for id, end := range running {
			if end <= now {
				delete(running, id)
				s.Active--
				if j := jobs[id%n]; id < n && j.approvalAt > 0 && p.approvals == approvalsRelease {
					again[id] = end + j.approvalWait
				} else {
					done++
				}
			}
		}
		if (s.Phase == PhaseLoading || s.Phase == PhaseUnloading) && phaseEnd <= now {
			if s.Phase == PhaseLoading {
				s.Phase = PhaseReady
			} else {
				s.Phase, s.Loaded = PhaseIdle, ""
			}
		}
		s.Now = epoch.Add(now)
	decide:
		for i := 0; i < 16; i++ {
			d := Decide(s)
			switch d.Kind {
			case ActGrant:
				s.Phase = PhaseReady
				order := Order(s)
				for k, id := range d.Grant {
					if k >= len(order) || order[k].ID != id {
						res.orderMismatches++
					}
				}
				for _, id := range d.Grant {
					j, _ := strconv.Atoi(id)
					for _, w := range s.Waiting {
						k, _ := strconv.Atoi(w.ID)
						if k != j && since[k] < since[j] && now-since[k] >= maxExtra {
							res.lateOvertakes++
						}
						if k != j && behind[j][k] {
							// J (shown behind K) starts first: K's card allowed it only while K
							// is within its bound, or when J is older (K was ahead of it only
							// to save a swap, and its card said so).
							if since[j] > since[k] && now-since[k] >= maxExtra {
								res.shownOvertakes++
							} else {
								res.allowedOvertakes++
							}
						}
					}
					running[j] = now + runOf(j)
					if j < n {
						res.waits[j] = now - since[j]
					} else {
						res.waits[j-n] += now - since[j]
					}
					if jb := jobs[j%n]; j < n && jb.approvalAt > 0 && p.approvals == approvalsHold {
						res.deviceHeldWaiting += jb.approvalWait
					}
					delete(behind, j)
					s.Active++
					for k, w := range s.Waiting {
						if w.ID == id {
							s.Waiting = append(s.Waiting[:k], s.Waiting[k+1:]...)
							break
						}
					}
				}
			case ActLoad:
				s.Phase, s.Loaded, phaseEnd = PhaseLoading, d.Model, now+p.load
				res.loads++
				break decide
			case ActUnload:
				s.Phase, phaseEnd = PhaseUnloading, now+p.unload
				break decide
			case ActDrain:
				s.Phase = PhaseDraining
				break decide
			case ActCancelDrain:
				panic("no drain bound is configured: running work is never cut")
			default:
				if s.Phase == PhaseDraining {
					s.Phase = PhaseReady
				}
				break decide
			}
		}
		// What the cards show now: every waiter's place in Order.
		order := Order(s)
		for i, w := range order {
			k, _ := strconv.Atoi(w.ID)
			if behind[k] == nil {
				behind[k] = map[int]bool{}
			}
			for _, a := range order[:i] {
				o, _ := strconv.Atoi(a.ID)
				behind[k][o] = true
			}
		}
		// The next moment something changes: an arrival, an answer, a job's end, a swap
		// step, or the oldest other-model waiter reaching the aging bound.
		nxt := time.Duration(-1)
		consider := func(t time.Duration) {
			if t > now && (nxt < 0 || t < nxt) {
				nxt = t
			}
		}
		if next < n {
			consider(jobs[next].arrive)
		}
		for _, at := range again {
			consider(at)
		}
		for _, end := range running {
			consider(end)
		}
		if s.Phase == PhaseLoading || s.Phase == PhaseUnloading {
			consider(phaseEnd)
		}
		for _, w := range s.Waiting {
			if w.Model != s.Loaded {
				consider(w.Since.Sub(epoch) + maxExtra)
				break
			}
		}
		if nxt < 0 {
			if done < n {
				panic(fmt.Sprintf("simulation stuck at %v: %+v", now, s))
			}
			break
		}
		now = nxt
	}
	var sum time.Duration
	for _, w := range res.waits {
		sum += w
		res.worstWait = max(res.worstWait, w)
	}
	res.meanWait = sum / time.Duration(n)
	return res
}

// compare runs both policies over one seeded job stream. extra is the worst, over jobs,
// of (its wait under ours - its wait under FIFO): how much later than its FIFO turn a
// job started.
func compare(p simParams) (fifo, ours simResult, extra time.Duration) {
	jobs := p.generate()
	fifo = simulate(jobs, p, 0)
	ours = simulate(jobs, p, p.maxExtraWaitM)
	for i := range jobs {
		extra = max(extra, ours.waits[i]-fifo.waits[i])
	}
	return fifo, ours, extra
}

// BenchmarkSwapPolicy (issue 14 item 2; issue 32 items 1-2) reports, for 1,000 seeded
// random jobs on one exclusive device, model loads (swaps) and the worst and mean wait
// under FIFO and under the swap-minimizing order, side by side, and ours' worst extra
// wait beyond FIFO: without approvals, and with 30 % of the jobs waiting up to 5 min for
// an approval mid-run, holding the device meanwhile (before issue 32) or releasing it
// (now: a job's wait then includes re-acquiring the device after the answer).
//
//	go test -run '^$' -bench SwapPolicy -benchtime 1x ./agent/gpu/
func BenchmarkSwapPolicy(b *testing.B) {
	base := defaultSim(20261201)
	for _, p := range []simParams{base, base.withApprovals(approvalsHold), base.withApprovals(approvalsRelease)} {
		var fifo, ours simResult
		var extra time.Duration
		for i := 0; i < b.N; i++ {
			fifo, ours, extra = compare(p)
		}
		name := "no approvals"
		if p.approvals != "" {
			name = fmt.Sprintf("30%% of jobs wait up to %v for an approval and %s the device meanwhile", p.maxApproval, p.approvals)
		}
		b.Logf("seed %d: %d jobs, 4 models, arrivals every %v on average, runs %v-%v, swap %v; maxExtraWait %v; %s",
			p.seed, p.jobs, p.meanGap, p.minRun, p.maxRun, p.unload+p.load, p.maxExtraWaitM, name)
		b.Logf("  FIFO: %d loads, worst wait %v, mean %v | ours: %d loads, worst wait %v, mean %v, worst extra wait beyond FIFO %v; device held by jobs waiting for a person %v",
			fifo.loads, fifo.worstWait.Round(time.Second), fifo.meanWait.Round(time.Second), ours.loads, ours.worstWait.Round(time.Second),
			ours.meanWait.Round(time.Second), extra.Round(time.Second), ours.deviceHeldWaiting.Round(time.Minute))
		b.Logf("  ours: %d jobs started ahead of an older job that had waited maxExtraWait (bound: 0); %d grants not at shown position 1 (0);"+
			" %d starts ahead of a job shown ahead of it past its bound (0), %d within it", ours.lateOvertakes, ours.orderMismatches,
			ours.shownOvertakes, ours.allowedOvertakes)
		if p.approvals == "" {
			b.ReportMetric(float64(fifo.loads), "fifo-swaps")
			b.ReportMetric(float64(ours.loads), "ours-swaps")
			b.ReportMetric(fifo.worstWait.Minutes(), "fifo-worst-wait-min")
			b.ReportMetric(ours.worstWait.Minutes(), "ours-worst-wait-min")
			b.ReportMetric(extra.Minutes(), "ours-worst-extra-wait-min")
			b.ReportMetric(float64(ours.lateOvertakes), "ours-overtakes-past-bound")
		} else {
			b.ReportMetric(ours.meanWait.Minutes(), "ours-mean-wait-min-approvals-"+p.approvals)
			b.ReportMetric(ours.worstWait.Minutes(), "ours-worst-wait-min-approvals-"+p.approvals)
		}
	}
}

// TestSwapPolicyBeatsFIFO (item 2): over 1,000 random jobs per seed (printed), the
// swap-minimizing order loads models fewer times than FIFO; no job is ever started ahead
// of an older one that has waited MaxExtraWait; Decide always starts the job its card
// shows first (Order), and no job starts ahead of one shown ahead of it except as that
// one's bound allows (issue 32 item 2, also with approval waits releasing the device); and so no job starts later than under
// FIFO by more than MaxExtraWait plus one job's run time (a job that went ahead just
// before the bound runs to its end: running work is never cut).
//
// One seed is drawn at random each run; PA_SIM_SEED=N reruns only seed N.
func TestSwapPolicyBeatsFIFO(t *testing.T) {
	random := time.Now().UnixNano() % 1000000
	seeds := []int64{20261201, random}
	for s := int64(1); s <= 20; s++ {
		seeds = append(seeds, s)
	}
	if v := os.Getenv("PA_SIM_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, "PA_SIM_SEED must be an integer")
		seeds = []int64{n}
	} else {
		t.Logf("random seed this run: %d (rerun it alone with PA_SIM_SEED=%d)", random, random)
	}
	for _, seed := range seeds {
		p := defaultSim(seed)
		fifo, ours, extra := compare(p)
		t.Logf("seed %d: FIFO %d loads (worst wait %v), ours %d loads (worst wait %v), worst extra wait %v (maxExtraWait %v, longest run %v)", seed,
			fifo.loads, fifo.worstWait.Round(time.Second), ours.loads, ours.worstWait.Round(time.Second), extra.Round(time.Second), p.maxExtraWaitM, p.maxRun)
		require.Less(t, ours.loads, fifo.loads, "seed %d", seed)
		require.Zero(t, ours.lateOvertakes, "seed %d: a job went ahead of one that had waited the bound", seed)
		require.Zero(t, ours.orderMismatches, "seed %d: Decide started a job Order did not show first", seed)
		require.Zero(t, ours.shownOvertakes, "seed %d: a job went ahead of one shown ahead of it past its bound", seed)
		require.LessOrEqual(t, extra, p.maxExtraWaitM+p.maxRun, "seed %d", seed)
		// With approval waits that release the device (issue 32): the same promises, and
		// no device time is held by a job waiting for a person.
		_, rel, _ := compare(p.withApprovals(approvalsRelease))
		require.Zero(t, rel.lateOvertakes+rel.orderMismatches+rel.shownOvertakes, "seed %d with approvals: %+v", seed, rel)
		require.Zero(t, rel.deviceHeldWaiting)
		_, hold, _ := compare(p.withApprovals(approvalsHold))
		require.Positive(t, hold.deviceHeldWaiting, "seed %d: the simulation counts holding", seed)
	}
}
