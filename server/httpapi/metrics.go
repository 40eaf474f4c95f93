package httpapi

import (
	"net/http"

	"github.com/volplane/volplane/structs"
)

// metrics serves GET /v1/metrics: this server's metrics in the Prometheus
// text format, from Config.Metrics (the metrics package's registry). Unlike
// Nomad's endpoint of the same path there is no JSON form: every query
// parameter is ignored.
func (h *handler) metrics(w http.ResponseWriter, r *http.Request) {
	if h.metricsHandler == nil {
		h.writeError(w, r, structs.ErrNotFound("metrics are not enabled on this agent"))
		return
	}
	h.metricsHandler.ServeHTTP(w, r)
}
