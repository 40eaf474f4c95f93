package server

// registerEndpoints puts every RPC endpoint on the server's net/rpc server.
// Each endpoint follows one shape: forward → validate → raft apply or
// blocking query → set the reply's index.
func (s *Server) registerEndpoints() {
	for name, rcvr := range map[string]any{
		"Status":    &Status{srv: s},
		"Operator":  &Operator{srv: s},
		"Node":      &Node{srv: s, logger: s.logger.Named("node")},
		"CSIVolume": &CSIVolume{srv: s, logger: s.logger.Named("csi_volume")},
		"CSIPlugin": &CSIPlugin{srv: s},
	} {
		if err := s.rpcServer.RegisterName(name, rcvr); err != nil {
			panic("registering endpoint " + name + ": " + err.Error())
		}
	}
}
