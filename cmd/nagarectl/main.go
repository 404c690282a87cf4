// Command nagarectl is nagare's command-line tool. Each subcommand is one
// entry in the commands table with its own flag.FlagSet; add new ones
// (dump-flows, ...) there, in a file of their own.
//
//	nagarectl lab run SCENARIO [--out DIR] [--reps N] [--duration S]
//	nagarectl lab list
//	nagarectl lab perf DIR [--figures docs/perf-figures.md]
//	nagarectl help
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand. run gets the arguments after the command's
// name; returning a usageError prints the command's usage and exits 2.
type command struct {
	name    string
	summary string
	usage   string
	run     func(args []string, stdout, stderr io.Writer) error
}

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// commands are the top-level subcommands, keyed by name.
var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch runs the subcommand named by args[0] and returns the exit status.
func dispatch(args []string, stdout, stderr io.Writer) int {
	args = takeGlobalFlags(args)
	if len(args) == 0 {
		printHelp(stderr)
		return 2
	}
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" {
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				fmt.Fprintf(stdout, "usage: %s\n", c.usage)
				return 0
			}
		}
		printHelp(stdout)
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "nagarectl: unknown command %q\n\n", name)
		printHelp(stderr)
		return 2
	}
	err := c.run(args[1:], stdout, stderr)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "nagarectl %s: %s\nusage: %s\n", name, ue.msg, c.usage)
		return 2
	default:
		fmt.Fprintf(stderr, "nagarectl %s: %v\n", name, err)
		return 1
	}
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "usage: nagarectl COMMAND [ARGS]\n\ncommands:")
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "  %-10s %s\n", "help", "show this help, or `help COMMAND` for one command's usage")
}
