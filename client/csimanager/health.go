package csimanager

import (
	"time"

	"github.com/volplane/volplane/structs"
)

// pluginHealth is the health state machine of one plugin instance. It is
// fed the outcome of each fingerprint and decides what the node reports:
//
//   - Hysteresis: after a good fingerprint, failures (errors, or a plugin
//     answering ready=false) are hidden until threshold of them came in a
//     row, so a plugin that blips does not flap the cluster's view; one
//     good fingerprint makes it healthy again.
//   - An instance that never fingerprinted well has nothing healthy to keep
//     showing: it is reported unhealthy with the reason at once, so an
//     operator sees why a configured plugin does not work.
//   - A socket missing for longer than goneTTL removes the instance from
//     the report, so the servers drop it from the plugin.
//
// It is pure: no clock, no I/O, no locking (its owner locks).
type pluginHealth struct {
	pluginID  string
	typ       structs.CSIPluginType // configured; "" = from capabilities
	threshold int
	goneTTL   time.Duration

	// lastGood is the last healthy fingerprint; nil before the first one.
	lastGoodController, lastGoodNode *structs.CSIInfo
	// latest is what the last fingerprint returned when it returned one
	// (even unhealthy), so a plugin that never became ready still shows
	// what it answered.
	latestController, latestNode *structs.CSIInfo
	failures                     int
	reason                       string
	missingSince                 time.Time
	gone                         bool
}

func newPluginHealth(pluginID string, typ structs.CSIPluginType, threshold int, goneTTL time.Duration) *pluginHealth {
	return &pluginHealth{pluginID: pluginID, typ: typ, threshold: threshold, goneTTL: goneTTL}
}

// observe records one fingerprint taken at now: its result (controller and
// node fingerprints, or err), and whether the plugin's socket was missing.
func (h *pluginHealth) observe(now time.Time, controller, node *structs.CSIInfo, err error, socketMissing bool) {
	switch {
	case !socketMissing:
		h.missingSince = time.Time{}
		h.gone = false
	case h.missingSince.IsZero():
		h.missingSince = now
	}
	if socketMissing && now.Sub(h.missingSince) >= h.goneTTL {
		h.gone = true
	}

	if err == nil && (controller != nil || node != nil) {
		h.latestController, h.latestNode = controller.Copy(), node.Copy()
		if healthy(controller, node) {
			h.lastGoodController, h.lastGoodNode = h.latestController, h.latestNode
			h.failures = 0
			h.reason = ""
			return
		}
		h.failures++
		h.reason = description(controller, node)
		return
	}
	if err == nil {
		h.failures++
		h.reason = "plugin returned no fingerprint"
		return
	}
	h.failures++
	h.reason = err.Error()
}

// markDown makes the instance reported unhealthy at once for reason, as if
// threshold fingerprints had failed; the next good one makes it healthy.
func (h *pluginHealth) markDown(reason string) {
	h.failures = max(h.failures, h.threshold)
	h.reason = reason
}

// healthy reports whether every given fingerprint is healthy.
func healthy(infos ...*structs.CSIInfo) bool {
	for _, i := range infos {
		if i != nil && !i.Healthy {
			return false
		}
	}
	return true
}

func description(infos ...*structs.CSIInfo) string {
	for _, i := range infos {
		if i != nil && !i.Healthy && i.HealthDescription != "" {
			return i.HealthDescription
		}
	}
	return "unhealthy"
}

// report returns the fingerprints the node reports for the instance; both
// nil when it is gone.
func (h *pluginHealth) report() (controller, node *structs.CSIInfo) {
	if h.gone {
		return nil, nil
	}
	if h.lastGoodController != nil || h.lastGoodNode != nil {
		controller, node = h.lastGoodController.Copy(), h.lastGoodNode.Copy()
		if h.failures < h.threshold {
			return controller, node
		}
	} else if h.latestController != nil || h.latestNode != nil {
		controller, node = h.latestController.Copy(), h.latestNode.Copy()
	} else {
		controller, node = h.placeholder()
	}
	for _, i := range []*structs.CSIInfo{controller, node} {
		if i != nil {
			i.Healthy = false
			i.HealthDescription = h.reason
		}
	}
	return controller, node
}

// placeholder stands for an instance that never answered a fingerprint,
// on the sides its configured type says it runs (the node side when the
// type is left to the plugin).
func (h *pluginHealth) placeholder() (controller, node *structs.CSIInfo) {
	if h.reason == "" {
		// Not fingerprinted yet: nothing to report.
		return nil, nil
	}
	if h.typ == structs.CSIPluginTypeController || h.typ == structs.CSIPluginTypeMonolith {
		controller = &structs.CSIInfo{PluginID: h.pluginID, ControllerInfo: &structs.CSIControllerInfo{}}
	}
	if h.typ != structs.CSIPluginTypeController {
		node = &structs.CSIInfo{PluginID: h.pluginID, NodeInfo: &structs.CSINodeInfo{}}
	}
	return controller, node
}

// isHealthy is the reported health, as the ClientCSI endpoint judges it.
func (h *pluginHealth) isHealthy() bool {
	c, n := h.report()
	return (c != nil || n != nil) && healthy(c, n)
}
