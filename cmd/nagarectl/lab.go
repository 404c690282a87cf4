package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nagare-net/nagare/pkg/lab"
	"github.com/nagare-net/nagare/pkg/lab/pktgen"
)

func init() {
	register(&command{
		name:    "lab",
		summary: "run the lab's scenarios (data planes compared with real tools)",
		usage:   "nagarectl lab run SCENARIO [--out DIR] [--reps N] [--duration 5s] [--timeout 10m] [--dataplanes A,B] [--loads A,B] [--proxies A,B] | nagarectl lab list | nagarectl lab report DIR | nagarectl lab perf DIR [--figures docs/perf-figures.md] | nagarectl lab pktgen send|recv [FLAGS]",
		run:     runLab,
	})
}

func runLab(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("missing subcommand (run or list)")
	}
	switch args[0] {
	case "list":
		if len(args) > 1 {
			return usagef("lab list takes no arguments")
		}
		return labList(stdout)
	case "run":
		return labRun(args[1:], stdout, stderr)
	case "report":
		if len(args) != 2 {
			return usagef("lab report takes one results directory")
		}
		return labReport(args[1], stdout)
	case "perf":
		return labPerf(args[1:], stdout)
	case "slowctl":
		return lab.SlowControllerMain(args[1:])
	case "pktgen":
		// The flow-setup packet generator; the lab runs it inside pod
		// namespaces (ip netns exec) as this very executable.
		return pktgen.Main(args[1:], stdout, stderr)
	default:
		return usagef("unknown lab subcommand %q (want run, list, report, perf or pktgen)", args[0])
	}
}

// labReport re-renders a finished run's summary.md and plots from its
// results.json (e.g. after the report format changed) and prints the tables.
func labReport(dir string, w io.Writer) error {
	res, err := lab.ReadResult(dir)
	if err != nil {
		return err
	}
	if err := res.WriteFiles(dir); err != nil {
		return err
	}
	res.WriteMarkdown(w)
	return nil
}

// labPerf prints the figures of a make perf run (DIR: the scenarios'
// results in DIR/<scenario>, the benchmarks' output in DIR/bench.txt)
// beside their peers and the values the docs quote.
func labPerf(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("lab perf", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	figures := fs.String("figures", "docs/perf-figures.md", "the table of the figures the docs quote")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("lab perf takes one results directory")
	}
	f, err := os.Open(*figures)
	if err != nil {
		return err
	}
	quoted, err := lab.ReadQuotedFigures(f)
	f.Close()
	if err != nil {
		return err
	}
	rows, err := lab.PerfReport(pos[0], quoted)
	if err != nil {
		return err
	}
	lab.WritePerfReport(w, rows)
	return nil
}

// parseInterspersed parses args with fs, flags before or after the
// positional arguments, and returns those.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usagef("%v", err)
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func labList(w io.Writer) error {
	fmt.Fprintln(w, "scenarios:")
	for _, n := range lab.ScenarioNames() {
		s, err := lab.LoadScenario(n)
		if err != nil {
			fmt.Fprintf(w, "  %-18s (invalid: %v)\n", n, err)
			continue
		}
		fmt.Fprintf(w, "  %-18s %s\n", n, firstLine(s.Description))
	}
	fmt.Fprintln(w, "\ndata planes:")
	for _, n := range lab.DataPlaneNames() {
		dp, _ := lab.NewDataPlane(n)
		avail := "available"
		if err := dp.Available(); err != nil {
			avail = err.Error()
		}
		fmt.Fprintf(w, "  %-20s %-16s %s [%s]\n", n, dp.Scope(), dp.Description(), avail)
	}
	fmt.Fprintln(w, "\nproxy placements (bookinfo measurements' proxies:, seed2-sidecar):")
	for _, n := range lab.ProxyPlacementNames() {
		pl, _ := lab.NewProxyPlacement(n)
		fmt.Fprintf(w, "  %-20s %s\n", n, pl.Description())
	}
	return nil
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}

func labRun(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lab run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("out", "", "output directory (default lab-results/<scenario>-<timestamp>)")
	reps := fs.Int("reps", 0, "repetitions (default: the scenario's)")
	// Durations as users type them (5s, 500ms, 2m), or a bare number of
	// seconds as --duration took before.
	var dur, timeout lab.Duration
	fs.Var(&dur, "duration", "per measurement, e.g. 5s or 500ms; a bare number is seconds (default: the scenario's)")
	fs.Var(&timeout, "timeout", "give up (and clean up) after this long, e.g. 10m (default: no limit)")
	planes := fs.String("dataplanes", "", "comma-separated data planes to run instead of the scenario's (a short timing run)")
	loads := fs.String("loads", "", "comma-separated load steps of the scenario to run (default: all of them)")
	proxies := fs.String("proxies", "", "comma-separated proxy placements of the bookinfo measurements to run instead of the scenario's (seed2-sidecar; `lab list` names them)")
	// Flags may come before or after the scenario name.
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one SCENARIO (a name from `nagarectl lab list` or a YAML file), got %d", len(pos))
	}
	if *reps < 0 || dur < 0 || timeout < 0 {
		return usagef("--reps, --duration and --timeout must not be negative")
	}
	s, err := lab.LoadScenario(pos[0])
	if err != nil {
		return err
	}
	if *planes != "" {
		s.DataPlanes = strings.Split(*planes, ",")
	}
	if *proxies != "" {
		s.SetProxies(strings.Split(*proxies, ","))
	}
	if *loads != "" {
		byName := map[string]lab.LoadSpec{}
		for _, l := range s.Loads {
			byName[l.Name] = l
		}
		var keep []lab.LoadSpec
		for _, n := range strings.Split(*loads, ",") {
			l, ok := byName[n]
			if !ok {
				return usagef("--loads: %s has no load step %q", s.Name, n)
			}
			keep = append(keep, l)
		}
		s.Loads = keep
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(timeout))
		defer cancel()
	}
	res, err := lab.Run(ctx, s, lab.Options{
		OutDir:   *out,
		Reps:     *reps,
		Duration: time.Duration(dur),
		Progress: stderr,
	})
	if res != nil {
		res.WriteMarkdown(stdout)
		if res.OutDir != "" {
			fmt.Fprintf(stderr, "results: %s (summary.md, results.json, samples.csv, commands.log, *.png)\n", res.OutDir)
		}
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted; everything the lab created was removed")
	}
	return err
}
