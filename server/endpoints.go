package server

import netrpc "net/rpc"

// registerEndpoints puts every RPC endpoint on the server's net/rpc server.
// Each endpoint follows one shape: forward → validate → raft apply or
// blocking query → set the reply's index.
func (s *Server) registerEndpoints() {
	s.registerEndpointsOn(s.rpcServer, nil)
}

// registerEndpointsOn registers every endpoint on srv. conn is the yamux
// session the server's connections arrive on, or nil for the shared server
// (plain connections and in-process calls).
func (s *Server) registerEndpointsOn(srv *netrpc.Server, conn *sessionConn) {
	for name, rcvr := range s.endpoints(conn) {
		if err := srv.RegisterName(name, rcvr); err != nil {
			panic("registering endpoint " + name + ": " + err.Error())
		}
	}
}

// endpoints are the RPC endpoints by name; every method of theirs must
// have a row in rpcAccess and one in aclRules.
func (s *Server) endpoints(conn *sessionConn) map[string]any {
	return map[string]any{
		"Status":     &Status{srv: s},
		"Operator":   &Operator{srv: s},
		"Node":       &Node{srv: s, conn: conn, logger: s.logger.Named("node")},
		"CSIVolume":  &CSIVolume{srv: s, logger: s.logger.Named("csi_volume")},
		"CSIPlugin":  &CSIPlugin{srv: s},
		"ClientCSI":  &ClientCSI{srv: s},
		"FileSystem": &FileSystem{srv: s},
		"Job":        &Job{srv: s, logger: s.logger.Named("job")},
		"Alloc":      &Alloc{srv: s},
		"Keyring":    &Keyring{srv: s},
		"ACL":        &ACL{srv: s, logger: s.logger.Named("acl")},
		"Namespace":  &Namespace{srv: s},
		"System":     &System{srv: s},
	}
}
