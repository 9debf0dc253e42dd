//go:build amd64 || arm64

package stackgrow

func grow()
