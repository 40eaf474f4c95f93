package command

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/cli"
)

// unknownCommand says, when args name no command, which word is unknown,
// the nearest command when one is close, and the commands there are at
// that level. The cli library would print only the general help, which
// does not say what was wrong.
func unknownCommand(args []string, commands map[string]cli.CommandFactory) (string, bool) {
	// The words before the first flag are what names the command, as the
	// cli library reads them.
	var words []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		words = append(words, a)
	}
	if len(words) == 0 {
		return "", false
	}
	// The longest run of leading words that is a command; below a command
	// without subcommands the rest are its arguments.
	known := 0
	for n := len(words); n > 0; n-- {
		if _, ok := commands[strings.Join(words[:n], " ")]; ok {
			known = n
			break
		}
	}
	parent := strings.Join(words[:known], " ")
	if known == len(words) || (known > 0 && len(subcommands(parent, commands)) == 0) {
		return "", false
	}
	names := subcommands(parent, commands)
	unknown := words[known]
	if slices.Contains(names, unknown) {
		// A group with no command of its own ("a b" of "a b c"): the cli
		// library lists what is under it.
		return "", false
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Unknown command: volplane %s\n", strings.Join(words[:known+1], " "))
	if near := nearest(unknown, names); near != "" {
		fmt.Fprintf(&b, "Did you mean %q?\n", strings.TrimSpace(parent+" "+near))
	}
	if parent == "" {
		b.WriteString("\nCommands:\n")
	} else {
		fmt.Fprintf(&b, "\nSubcommands of %q:\n", parent)
	}
	width := len(slices.MaxFunc(names, func(a, b string) int { return len(a) - len(b) }))
	for _, name := range names {
		synopsis := ""
		if factory, ok := commands[strings.TrimSpace(parent+" "+name)]; ok {
			if cmd, err := factory(); err == nil {
				synopsis = cmd.Synopsis()
			}
		}
		fmt.Fprintf(&b, "    %-*s  %s\n", width, name, synopsis)
	}
	return strings.TrimRight(b.String(), "\n"), true
}

// subcommands lists the names one level under parent ("" is the top level),
// sorted: of the commands there, and of the groups deeper commands make.
func subcommands(parent string, commands map[string]cli.CommandFactory) []string {
	prefix := ""
	if parent != "" {
		prefix = parent + " "
	}
	var names []string
	for name := range commands {
		rest, ok := strings.CutPrefix(name, prefix)
		if ok && rest != "" {
			first, _, _ := strings.Cut(rest, " ")
			names = append(names, first)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// nearest returns the name closest to word in edit distance, when it is
// close enough to be a likely typo (at most a third of the word, and at
// least 1 edit allowed), else "".
func nearest(word string, names []string) string {
	best, bestDist := "", max(1, len(word)/3)+1
	for _, n := range names {
		if d := editDistance(word, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
