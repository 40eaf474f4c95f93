package testutil

import (
	"strconv"
	"strings"
	"testing"
)

// SeriesValue returns the value of one series (its name and labels as the
// text format writes them) in a Prometheus text scrape, 0 when it is
// absent.
func SeriesValue(t testing.TB, text, series string) float64 {
	t.Helper()
	return seriesSum(t, text, func(line string) bool { return strings.HasPrefix(line, series+" ") })
}

// SeriesTotal sums the values of the series in a Prometheus text scrape
// whose lines start with prefix (a name and the start of its labels:
// `name{peer_id="`), 0 when there is none.
func SeriesTotal(t testing.TB, text, prefix string) float64 {
	t.Helper()
	return seriesSum(t, text, func(line string) bool { return strings.HasPrefix(line, prefix) })
}

func seriesSum(t testing.TB, text string, match func(line string) bool) float64 {
	t.Helper()
	total := 0.0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "#") || !match(line) {
			continue
		}
		v := line[strings.LastIndexByte(line, ' ')+1:]
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("series line %q: value %q: %v", line, v, err)
		}
		total += f
	}
	return total
}
