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
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("series %s: value %q: %v", series, v, err)
			}
			return f
		}
	}
	return 0
}
