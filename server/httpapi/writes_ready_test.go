package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/server/httpapi/httpapitest"
)

// With WritesReady, a write waits until it is closed and then goes
// through; reads are answered meanwhile.
func TestWritesReady_HoldsWritesUntilClosed(t *testing.T) {
	be, _ := newTestHandler(t)
	ready := make(chan struct{})
	h := NewHandler(Config{Backend: be, WritesReady: ready, WritesReadyTimeout: time.Minute})

	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- do(t, h, http.MethodDelete, "/v1/volume/csi/vol1?force=true", "") }()
	// Reads are not held.
	must.Eq(t, http.StatusOK, do(t, h, http.MethodGet, "/v1/volumes", "").Code)
	must.Eq(t, http.StatusOK, do(t, h, http.MethodGet, "/v1/node/"+httpapitest.CompatNodeID, "").Code)
	select {
	case rec := <-done:
		t.Fatalf("the write was answered (%d %s) before writes were ready", rec.Code, rec.Body)
	default:
	}
	must.Nil(t, be.call("CSIVolume.Deregister"), must.Sprint("the write has not reached the backend"))

	close(ready)
	select {
	case rec := <-done:
		must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
	case <-time.After(30 * time.Second):
		t.Fatal("the write was not served once writes were ready")
	}
	must.NotNil(t, be.call("CSIVolume.Deregister"))
	// Once ready, writes are not held at all.
	must.Eq(t, http.StatusNotFound, do(t, h, http.MethodDelete, "/v1/volume/csi/vol1", "").Code)
}

// The wait is bounded: past WritesReadyTimeout the write is served and
// answers for itself; a caller that goes away stops waiting too.
func TestWritesReady_Bounded(t *testing.T) {
	be, _ := newTestHandler(t)
	h := NewHandler(Config{Backend: be, WritesReady: make(chan struct{}), WritesReadyTimeout: 50 * time.Millisecond})
	start := time.Now()
	rec := do(t, h, http.MethodDelete, "/v1/volume/csi/vol1?force=true", "")
	must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
	must.GreaterEq(t, 50*time.Millisecond, time.Since(start))

	h = NewHandler(Config{Backend: be, WritesReady: make(chan struct{}), WritesReadyTimeout: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest(http.MethodDelete, "/v1/volume/csi/vol1", nil).WithContext(ctx)
	done := make(chan struct{})
	go func() {
		h.ServeHTTP(httptest.NewRecorder(), req)
		close(done)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a write whose caller went away still waits")
	}
}
