package spec

import (
	"fmt"
	"math"
	"math/big"
	"strings"
	"unicode"
)

// sizeUnits maps a lower-case unit to its multiplier. Bare SI letters are
// decimal ("1G" is 10^9 bytes) and "i" units are binary ("1GiB" is 2^30),
// the same reading as Nomad's volume specifications.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9,
	"t": 1e12, "tb": 1e12, "p": 1e15, "pb": 1e15,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20,
	"gi": 1 << 30, "gib": 1 << 30, "ti": 1 << 40, "tib": 1 << 40,
	"pi": 1 << 50, "pib": 1 << 50,
}

// ParseSize reads a human size such as "10GiB", "500MB", "1G", "1.5 GiB" or
// "1024" (bytes) and returns the number of bytes. Units are case-insensitive.
func ParseSize(s string) (int64, error) {
	in := strings.TrimSpace(s)
	i := strings.IndexFunc(in, func(r rune) bool { return !unicode.IsDigit(r) && r != '.' })
	if i < 0 {
		i = len(in)
	}
	num, unit := in[:i], strings.ToLower(strings.TrimSpace(in[i:]))
	if num == "" {
		return 0, fmt.Errorf("%q is not a size: it must start with a number, as in \"10GiB\"", s)
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("%q is not a size: unknown unit %q (use B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB or PiB)", s, in[i:])
	}
	// big.Float keeps "1.5GiB" exact and makes overflow easy to see.
	f, _, err := big.ParseFloat(num, 10, 128, big.ToNearestEven)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %q is not a number", s, num)
	}
	f.Mul(f, new(big.Float).SetInt64(mult))
	if f.Cmp(new(big.Float).SetInt64(math.MaxInt64)) > 0 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	n, _ := f.Int64()
	return n, nil
}
