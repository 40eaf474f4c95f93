package httpapi

import (
	"net/http"

	"github.com/volplane/volplane/structs"
)

// metrics serves GET /v1/metrics from Config.Metrics (the metrics
// package's registry), which answers as Nomad's: JSON by default, the
// Prometheus text format with ?format=prometheus. The read headers are set
// as for any read, because Nomad's client refuses an answer without them.
func (h *handler) metrics(w http.ResponseWriter, r *http.Request) {
	if h.metricsHandler == nil {
		h.writeError(w, r, structs.ErrNotFound("metrics are not enabled on this agent"))
		return
	}
	setLocalMeta(w, true)
	h.metricsHandler.ServeHTTP(w, r)
}
