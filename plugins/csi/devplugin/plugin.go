package devplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	// PluginName is what GetPluginInfo answers.
	PluginName = "dev.csi.volplane.io"
	// PluginVersion is the vendor version GetPluginInfo answers.
	PluginVersion = "0.1.0"

	// stopGrace bounds how long Stop waits for calls in flight before it
	// cuts their connections.
	stopGrace = 5 * time.Second
)

// Config configures one plugin instance.
type Config struct {
	// Endpoint is the unix socket to serve on: "unix:///path/csi.sock",
	// "unix:/path/csi.sock" or a plain path.
	Endpoint string
	// StateDir holds the storage system (see the package documentation);
	// instances with the same StateDir share it.
	StateDir string
	// NodeID is this instance's node ID; the host name when empty.
	NodeID string
	// MaxVolumesPerNode limits the volumes controller-published to this
	// node at once; 0 means no limit.
	MaxVolumesPerNode int64
	// Topology, when set, is this node's accessible topology; the plugin
	// then advertises VOLUME_ACCESSIBILITY_CONSTRAINTS.
	Topology map[string]string
	// CreateOnDemand makes ControllerPublishVolume create a volume it does
	// not know (with the requested ID and a default size) instead of
	// answering NOT_FOUND, so that volumes registered by hand with
	// `volplane agent -dev` work without a CreateVolume call.
	CreateOnDemand bool
	// Disable names capabilities this instance does not have (see
	// disable.go): "controller:CREATE_DELETE_SNAPSHOT",
	// "node:STAGE_UNSTAGE_VOLUME", "plugin:ONLINE", ...
	Disable []string
	// Logger receives the plugin's logs; nothing is logged when nil.
	Logger hclog.Logger
}

// Plugin is one running instance of the development plugin.
type Plugin struct {
	cfg    Config
	socket string
	// disabled are the capabilities of Config.Disable.
	disabled map[string]bool
	store    *store
	logger   hclog.Logger

	// stopCtx ends hanging faults when the plugin stops.
	stopCtx context.Context
	stop    context.CancelFunc

	mu      sync.Mutex
	server  *grpc.Server
	started bool
	stopped bool
	wg      sync.WaitGroup
}

// New checks cfg, prepares the state directory and returns a plugin that is
// not serving yet. A state file that cannot be read is an error here.
func New(cfg Config) (*Plugin, error) {
	socket, err := socketPath(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.StateDir == "" {
		return nil, errors.New("devplugin: a state directory is required")
	}
	dir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("devplugin: state directory: %w", err)
	}
	cfg.StateDir = dir
	if cfg.NodeID == "" {
		if cfg.NodeID, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("devplugin: no node ID given and no host name: %w", err)
		}
	}
	if cfg.MaxVolumesPerNode < 0 {
		return nil, errors.New("devplugin: max volumes per node must not be negative")
	}
	for k, v := range cfg.Topology {
		if k == "" || v == "" {
			return nil, fmt.Errorf("devplugin: topology segment %q=%q needs a key and a value", k, v)
		}
	}
	cfg.Topology = cloneMap(cfg.Topology)
	disabled, err := checkDisable(cfg.Disable)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	for _, d := range []string{dir, filepath.Join(dir, volumesDir), filepath.Join(dir, snapshotsDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("devplugin: creating state directory: %w", err)
		}
	}
	p := &Plugin{
		cfg:      cfg,
		socket:   socket,
		disabled: disabled,
		store:    &store{dir: dir},
		logger:   cfg.Logger.Named("devplugin").With("node_id", cfg.NodeID),
	}
	p.stopCtx, p.stop = context.WithCancel(context.Background())
	if err := p.store.view(func(*state) error { return nil }); err != nil {
		return nil, err
	}
	return p, nil
}

func socketPath(endpoint string) (string, error) {
	path := endpoint
	switch {
	case strings.HasPrefix(endpoint, "unix://"):
		path = strings.TrimPrefix(endpoint, "unix://")
	case strings.HasPrefix(endpoint, "unix:"):
		path = strings.TrimPrefix(endpoint, "unix:")
	case strings.Contains(endpoint, "://"):
		return "", fmt.Errorf("devplugin: endpoint %q is not a unix socket", endpoint)
	}
	if path == "" {
		return "", errors.New("devplugin: an endpoint is required")
	}
	return filepath.Abs(path)
}

// Endpoint is the address to dial: "unix://" and the socket's absolute path.
func (p *Plugin) Endpoint() string { return "unix://" + p.socket }

// NodeID is this instance's node ID.
func (p *Plugin) NodeID() string { return p.cfg.NodeID }

// StateDir is the absolute path of the state directory.
func (p *Plugin) StateDir() string { return p.cfg.StateDir }

// Start registers this instance's node with the storage system and serves
// on the socket (replacing a stale socket file) until Stop.
func (p *Plugin) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return errors.New("devplugin: already started")
	}
	if err := p.store.update(func(st *state) error {
		n := st.node(p.cfg.NodeID)
		n.MaxVolumes = p.cfg.MaxVolumesPerNode
		n.Topology = cloneMap(p.cfg.Topology)
		return nil
	}); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p.socket), 0o755); err != nil {
		return fmt.Errorf("devplugin: creating socket directory: %w", err)
	}
	// A socket left by a process that died is in the way; anything else at
	// that path is not ours to remove.
	if fi, err := os.Lstat(p.socket); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return fmt.Errorf("devplugin: %s exists and is not a socket", p.socket)
		}
		if err := os.Remove(p.socket); err != nil {
			return fmt.Errorf("devplugin: removing stale socket: %w", err)
		}
	}
	l, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("devplugin: listening: %w", err)
	}
	p.server = grpc.NewServer(grpc.UnaryInterceptor(p.intercept))
	csi.RegisterIdentityServer(p.server, &identityServer{p: p})
	csi.RegisterControllerServer(p.server, &controllerServer{p: p})
	csi.RegisterNodeServer(p.server, &nodeServer{p: p})
	csi.RegisterGroupControllerServer(p.server, &groupControllerServer{p: p})
	p.started = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := p.server.Serve(l); err != nil {
			p.logger.Error("serving failed", "error", err)
		}
	}()
	p.logger.Info("serving", "endpoint", p.Endpoint(), "state_dir", p.cfg.StateDir)
	return nil
}

// Stop ends hanging calls, waits (a while) for the others, stops serving
// and removes the socket. It may be called more than once.
func (p *Plugin) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started || p.stopped {
		return
	}
	p.stopped = true
	p.stop()
	done := make(chan struct{})
	go func() {
		p.server.GracefulStop()
		close(done)
	}()
	timer := time.NewTimer(stopGrace)
	select {
	case <-done:
	case <-timer.C:
		p.server.Stop()
		<-done
	}
	timer.Stop()
	p.wg.Wait()
	if err := os.Remove(p.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.logger.Warn("removing socket failed", "error", err)
	}
	p.logger.Info("stopped")
}

// intercept applies faults, runs the call, and records it in the call log
// and the log.
func (p *Plugin) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	resp, injected, err := p.applyFault(ctx, method)
	if !injected {
		if err = p.disabledCall(method); err == nil {
			resp, err = handler(ctx, req)
		}
	}
	err = toStatus(err)
	c := describeCall(method, req, resp)
	c.Time = time.Now().UTC()
	c.Instance = p.cfg.NodeID
	c.Code = status.Code(err)
	c.Injected = injected
	if err != nil {
		c.Message = status.Convert(err).Message()
	}
	if lerr := p.store.appendCall(c); lerr != nil {
		p.logger.Error("writing call log failed", "error", lerr)
	}
	args := []any{"method", method, "code", codeName(c.Code)}
	for _, kv := range [][2]string{{"volume_id", c.VolumeID}, {"node", c.NodeID},
		{"staging_path", c.StagingPath}, {"target_path", c.TargetPath}, {"error", c.Message}} {
		if kv[1] != "" {
			args = append(args, kv[0], kv[1])
		}
	}
	if injected {
		args = append(args, "injected", true)
	}
	p.logger.Debug("call", args...)
	return resp, err
}

// applyFault applies the fault set for method, if any. injected reports
// whether it decided the call's outcome.
func (p *Plugin) applyFault(ctx context.Context, method string) (resp any, injected bool, err error) {
	f, ok, err := p.store.takeFault(method)
	if err != nil {
		return nil, true, status.Error(codes.Internal, err.Error())
	}
	if !ok {
		return nil, false, nil
	}
	if f.Hang {
		select {
		case <-ctx.Done():
			return nil, true, status.FromContextError(ctx.Err()).Err()
		case <-p.stopCtx.Done():
			return nil, true, status.Error(codes.Unavailable, "devplugin: plugin stopped")
		}
	}
	if f.Code != codes.OK {
		msg := f.Message
		if msg == "" {
			msg = "devplugin: injected fault"
		}
		return nil, true, status.Error(f.Code, msg)
	}
	if f.NotReady {
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(false)}, true, nil
	}
	return nil, false, nil
}

// toStatus turns an error that is not a gRPC status (a state file that
// cannot be read, a failed write) into INTERNAL with its message.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}

func errorf(c codes.Code, format string, args ...any) error {
	return status.Errorf(c, format, args...)
}
