package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Report is the outcome of one run; it is what -json prints.
type Report struct {
	Started time.Time `json:"started"`
	Elapsed Seconds   `json:"elapsed_s"`
	Config  RunConfig `json:"config"`
	// EntryBytes is the size of each Raft entry of the register phase, on
	// both sides.
	EntryBytes int      `json:"entry_bytes,omitempty"`
	Results    []Result `json:"results"`
	// Notes are events that make figures less trustworthy.
	Notes []string `json:"notes,omitempty"`
	// Pass is true when no result has a missed target.
	Pass bool `json:"pass"`
}

// RunConfig is the part of Config worth reporting.
type RunConfig struct {
	Ops          int      `json:"ops"`
	SerialOps    int      `json:"serial_ops"`
	Writers      int      `json:"writers"`
	Rounds       int      `json:"rounds"`
	ListSizes    []int    `json:"list_sizes"`
	ListRequests int      `json:"list_requests"`
	ListBatch    int      `json:"list_batch"`
	Phases       []string `json:"phases"`
	Breakdown    bool     `json:"breakdown,omitempty"`
}

func reportConfig(c Config) RunConfig {
	return RunConfig{
		Ops: c.Ops, SerialOps: c.SerialOps, Writers: c.Writers, Rounds: c.Rounds,
		ListSizes: c.ListSizes, ListRequests: c.ListRequests, ListBatch: c.ListBatch,
		Phases: c.Phases, Breakdown: c.Breakdown,
	}
}

// Result is one measured level: a phase at one concurrency (and, for the
// list, one volume count).
type Result struct {
	// Phase is "baseline", "register", "raft+fsm" (with Config.Breakdown)
	// or "list".
	Phase       string  `json:"phase"`
	Volumes     int     `json:"volumes,omitempty"`
	Concurrency int     `json:"concurrency"`
	Ops         int     `json:"ops"`
	Elapsed     Seconds `json:"elapsed_s"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	P50         Millis  `json:"p50_ms"`
	P99         Millis  `json:"p99_ms"`
	Max         Millis  `json:"max_ms"`
	// ThroughputRatio and P99Ratio compare a register (or raft+fsm) result
	// with the baseline at the same concurrency.
	ThroughputRatio float64 `json:"throughput_ratio,omitempty"`
	P99Ratio        float64 `json:"p99_ratio,omitempty"`
	// Target says what the result must reach; Pass whether it did (nil
	// when there is no target).
	Target string `json:"target,omitempty"`
	Pass   *bool  `json:"pass,omitempty"`
}

// Seconds is a duration that JSON shows in seconds.
type Seconds time.Duration

func (s Seconds) MarshalJSON() ([]byte, error) {
	return json.Marshal(round3(time.Duration(s).Seconds()))
}

// Millis is a duration that JSON shows in milliseconds.
type Millis time.Duration

func (m Millis) MarshalJSON() ([]byte, error) {
	return json.Marshal(round3(float64(m) / float64(time.Millisecond)))
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

func newResult(phase string, conc int, st stats) Result {
	return Result{
		Phase: phase, Concurrency: conc, Ops: st.ops, Elapsed: Seconds(st.wall),
		OpsPerSec: math.Round(st.opsPerSec), P50: Millis(st.p50), P99: Millis(st.p99), Max: Millis(st.max),
	}
}

// addRegister adds a baseline level, the register level paired with it
// and, when measured, the raft+fsm level. With the concurrent writers,
// register throughput must reach TargetThroughputRatio of the baseline's;
// at every level its p99 must stay within TargetP99Ratio of the baseline's.
func (r *Report) addRegister(writers, targetWriters int, base, vp stats, apply *stats) {
	compared := func(phase string, st stats) Result {
		res := newResult(phase, writers, st)
		if base.opsPerSec > 0 {
			res.ThroughputRatio = round3(st.opsPerSec / base.opsPerSec)
		}
		if base.p99 > 0 {
			res.P99Ratio = round3(float64(st.p99) / float64(base.p99))
		}
		return res
	}
	v := compared(PhaseRegister, vp)
	pass := v.P99Ratio <= TargetP99Ratio
	v.Target = fmt.Sprintf("p99 <= %gx", TargetP99Ratio)
	if writers == targetWriters && writers > 1 {
		pass = pass && v.ThroughputRatio >= TargetThroughputRatio
		v.Target = fmt.Sprintf("ops/s >= %gx, ", TargetThroughputRatio) + v.Target
	}
	v.Pass = &pass
	r.Results = append(r.Results, newResult(PhaseBaseline, writers, base), v)
	if apply != nil {
		r.Results = append(r.Results, compared(PhaseApply, *apply))
	}
}

// addList adds the list level of size volumes, judged by its p50.
func (r *Report) addList(size int, st stats) {
	l := newResult(PhaseList, 1, st)
	l.Volumes = size
	if t := ListTargetP50(size); t > 0 {
		pass := st.p50 < t
		l.Target = "p50 < " + t.String()
		l.Pass = &pass
	}
	r.Results = append(r.Results, l)
}

func (r *Report) allPass() bool {
	for _, res := range r.Results {
		if res.Pass != nil && !*res.Pass {
			return false
		}
	}
	return true
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// Targets read "p99 <= 2x", not "p99 \u003c= 2x".
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteTable writes the report as an aligned table with a short header.
func (r *Report) WriteTable(w io.Writer) error {
	if r.EntryBytes > 0 {
		fmt.Fprintln(w, "register: CSIVolume.Register, one volume per call, over RPC to the leader of 3 volplane servers")
		fmt.Fprintf(w, "baseline: raft.Apply of %d-byte entries (a register entry's size) on 3 bare raft + raft-boltdb nodes\n", r.EntryBytes)
		if r.Config.Breakdown {
			fmt.Fprintln(w, "raft+fsm: raft.Apply of register entries on the volplane leader (state machine in, RPC and endpoint out)")
		}
		fmt.Fprintf(w, "the sides ran interleaved in %d rounds; ratios are volplane / baseline at the same concurrency\n\n", r.Config.Rounds)
	}
	rows := [][]string{{"phase", "volumes", "conc", "ops", "ops/s", "p50", "p99", "ops/s ratio", "p99 ratio", "target", "result"}}
	for _, res := range r.Results {
		rows = append(rows, []string{
			res.Phase, intOrDash(res.Volumes), strconv.Itoa(res.Concurrency), strconv.Itoa(res.Ops),
			strconv.FormatFloat(res.OpsPerSec, 'f', 0, 64),
			fmtDuration(time.Duration(res.P50)), fmtDuration(time.Duration(res.P99)),
			ratioOrDash(res.ThroughputRatio), ratioOrDash(res.P99Ratio), orDash(res.Target), verdict(res.Pass),
		})
	}
	// Names and verdicts read best left-aligned, numbers right-aligned.
	if err := writeColumns(w, rows, map[int]bool{0: true, 9: true, 10: true}); err != nil {
		return err
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	v := "every target met"
	if !r.Pass {
		v = "MISSED targets: " + strings.Join(r.missed(), "; ")
	}
	_, err := fmt.Fprintf(w, "\n%s (run took %s)\n", v, time.Duration(r.Elapsed).Round(100*time.Millisecond))
	return err
}

func (r *Report) missed() []string {
	var out []string
	for _, res := range r.Results {
		if res.Pass != nil && !*res.Pass {
			name := fmt.Sprintf("%s with %d writer(s)", res.Phase, res.Concurrency)
			if res.Phase == PhaseList {
				name = fmt.Sprintf("list of %d volumes", res.Volumes)
			}
			out = append(out, name+" ("+res.Target+")")
		}
	}
	return out
}

// fmtDuration prints a latency with three significant digits in ms or µs.
func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', decimals(float64(d)/float64(time.Millisecond)), 64) + "ms"
	default:
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + "µs"
	}
}

func decimals(f float64) int {
	switch {
	case f >= 100:
		return 0
	case f >= 10:
		return 1
	}
	return 2
}

func intOrDash(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func ratioOrDash(f float64) string {
	if f == 0 {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 2, 64) + "x"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func verdict(p *bool) string {
	switch {
	case p == nil:
		return "-"
	case *p:
		return "PASS"
	}
	return "MISS"
}

// writeColumns writes rows as columns two spaces apart, each as wide as its
// widest cell; the columns in left are left-aligned, the others right.
func writeColumns(w io.Writer, rows [][]string, left map[int]bool) error {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i > 0 {
				b.WriteString("  ")
			}
			if left[i] {
				b.WriteString(cell)
				if i < len(row)-1 {
					b.WriteString(pad)
				}
			} else {
				b.WriteString(pad + cell)
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
