package allocrunner

import (
	"errors"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// The claim backoff starts at the minimum, doubles up to the maximum, and
// is at most a fifth shorter (jitter), never longer.
func TestManager_Backoff(t *testing.T) {
	m := &Manager{cfg: Config{Timing: Timing{ClaimBackoffMin: time.Second, ClaimBackoffMax: 30 * time.Second}}}
	for attempt, want := range map[int]time.Duration{
		1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 5: 16 * time.Second,
		6: 30 * time.Second, 40: 30 * time.Second, 1000: 30 * time.Second,
	} {
		for range 20 {
			got := m.backoff(attempt)
			must.LessEq(t, want, got, must.Sprintf("attempt %d", attempt))
			must.GreaterEq(t, want-want/5, got, must.Sprintf("attempt %d", attempt))
		}
	}
}

// A claim refused for a reason that may pass is retried; one refused for
// what it asks is not.
func TestClaimRetryable(t *testing.T) {
	for code, want := range map[structs.ErrorCode]bool{
		structs.ErrCodeMaxClaims: true, structs.ErrCodeRetryable: true, structs.ErrCodeNoLeader: true,
		structs.ErrCodeNoNodeConn: true, structs.ErrCodeUnschedulable: true, structs.ErrCodeInternal: true,
		structs.ErrCodeInvalid: false, structs.ErrCodeNotFound: false, structs.ErrCodePermissionDenied: false,
		structs.ErrCodeConflict: false, structs.ErrCodeTooLarge: false,
	} {
		must.Eq(t, want, claimRetryable(structs.NewError(code, "x")), must.Sprint(code))
	}
	must.True(t, claimRetryable(errors.New("plain errors are internal")))
}
