module github.com/volplane/volplane/e2e/nomadcli

go 1.26.8

require (
	github.com/shoenig/test v1.13.2
	github.com/volplane/volplane v0.0.0
)

require github.com/google/go-cmp v0.7.0 // indirect

replace github.com/volplane/volplane => ../..
