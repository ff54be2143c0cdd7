package kmsplugin

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/cairn-kv/cairn/api/kmspb"
)

// ProtocolVersion is the plugin protocol's version; Cairn refuses a plugin that speaks another.
const ProtocolVersion = 1

// Handshake is the go-plugin handshake a Cairn KMS plugin and Cairn agree on.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "CAIRN_KMS_PLUGIN",
	MagicCookieValue: "9c1f3e0a-kms-v1",
}

// pluginName is the one plugin a KMS plugin binary serves.
const pluginName = "kms"

// Serve runs a plugin binary's KeyService until Cairn stops it; call it from the plugin's main.
func Serve(service kmspb.KeyServiceServer) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugin.PluginSet{pluginName: &grpcPlugin{server: service}},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}

// grpcPlugin is the go-plugin glue: the server side registers the KeyService, the client side returns its client.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	server kmspb.KeyServiceServer
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	kmspb.RegisterKeyServiceServer(s, p.server)
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return kmspb.NewKeyServiceClient(conn), nil
}
