package kmsplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/kmspb"
	"github.com/cairn-kv/cairn/internal/seal"
)

// Provider is a seal.Provider served by a KMS plugin process, started again whenever it has died.
type Provider struct {
	cfg    seal.KMSConfig
	logger *slog.Logger

	mu      sync.Mutex
	client  *plugin.Client // nil until started; a new one after the last exited
	service kmspb.KeyServiceClient
	starts  int
	closed  bool
}

// OpenProvider starts the plugin of cfg and checks its status; it is a seal.KMSOpener.
func OpenProvider(cfg seal.KMSConfig, logger *slog.Logger) (seal.Provider, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = seal.DefaultKMSTimeout
	}
	if logger == nil {
		logger = slog.Default()
	}
	p := &Provider{cfg: cfg, logger: logger.With("kms", cfg.Name)}
	var resp *kmspb.StatusResponse
	err := p.call(context.Background(), func(ctx context.Context, kms kmspb.KeyServiceClient) (err error) {
		resp, err = kms.Status(ctx, &kmspb.StatusRequest{})
		return err
	})
	if err == nil && (resp.Version != "v1" || resp.Healthz != "ok") {
		err = fmt.Errorf("plugin reports version %q, health %q; want v1 and ok", resp.Version, resp.Healthz)
	}
	if err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("kms plugin %q (%s): %w", cfg.Name, cfg.Command, err)
	}
	p.logger.Info("kms plugin ready", "command", cfg.Command, "key", resp.KeyId)
	return p, nil
}

// Name is the provider's name in sealed values' headers.
func (p *Provider) Name() string { return p.cfg.Name }

// Wrap asks the plugin to encrypt dataKey under its primary key.
func (p *Provider) Wrap(ctx context.Context, dataKey []byte) (string, []byte, error) {
	var resp *kmspb.EncryptResponse
	err := p.call(ctx, func(ctx context.Context, kms kmspb.KeyServiceClient) (err error) {
		resp, err = kms.Encrypt(ctx, &kmspb.EncryptRequest{Plaintext: dataKey})
		return err
	})
	if err != nil {
		return "", nil, err
	}
	return resp.KeyId, resp.Ciphertext, nil
}

// Unwrap asks the plugin to decrypt a data key wrapped under keyID.
func (p *Provider) Unwrap(ctx context.Context, keyID string, wrapped []byte) ([]byte, error) {
	var resp *kmspb.DecryptResponse
	err := p.call(ctx, func(ctx context.Context, kms kmspb.KeyServiceClient) (err error) {
		resp, err = kms.Decrypt(ctx, &kmspb.DecryptRequest{Ciphertext: wrapped, KeyId: keyID})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.Plaintext, nil
}

// PrimaryKeyID asks the plugin for its primary key (seal.PrimaryReporter): a rotation in the KMS reaches new data
// keys within seal.PrimaryCheckInterval.
func (p *Provider) PrimaryKeyID(ctx context.Context) (string, error) {
	var resp *kmspb.StatusResponse
	err := p.call(ctx, func(ctx context.Context, kms kmspb.KeyServiceClient) (err error) {
		resp, err = kms.Status(ctx, &kmspb.StatusRequest{})
		return err
	})
	if err != nil {
		return "", err
	}
	return resp.KeyId, nil
}

// Close stops the plugin process.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.client != nil {
		p.client.Kill()
	}
	return nil
}

// call runs fn against the plugin within the configured timeout. A call that fails as unavailable (the plugin
// may have died) is tried once more, on a plugin started again if the last one exited.
func (p *Provider) call(ctx context.Context, fn func(ctx context.Context, kms kmspb.KeyServiceClient) error) error {
	var last error
	for range 2 {
		kms, err := p.running()
		if err != nil {
			return fmt.Errorf("%w: kms %q: %w", seal.ErrUnavailable, p.cfg.Name, err)
		}
		callCtx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
		err = fn(callCtx, kms)
		cancel()
		if err == nil {
			return nil
		}
		if last = p.typed(err); !errors.Is(last, seal.ErrUnavailable) || ctx.Err() != nil {
			return last
		}
	}
	return last
}

// typed maps the plugin's gRPC errors to seal's.
func (p *Provider) typed(err error) error {
	switch status.Code(err) {
	case codes.NotFound:
		return fmt.Errorf("%w: kms %q: %w", seal.ErrUnknownKey, p.cfg.Name, err)
	case codes.InvalidArgument:
		return fmt.Errorf("%w: kms %q: %w", seal.ErrAuthFailed, p.cfg.Name, err)
	}
	return fmt.Errorf("%w: kms %q: %w", seal.ErrUnavailable, p.cfg.Name, err)
}

// running returns the client of a live plugin process, starting one when there is none or the last exited.
func (p *Provider) running() (kmspb.KeyServiceClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("provider closed")
	}
	if p.client != nil && !p.client.Exited() {
		return p.service, nil
	}
	if p.client != nil {
		p.client.Kill()
		p.logger.Warn("kms plugin exited; starting it again", "command", p.cfg.Command, "starts", p.starts)
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          plugin.PluginSet{pluginName: &grpcPlugin{}},
		Cmd:              pluginCommand(p.cfg.Command, p.cfg.Args),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		StartTimeout:     p.cfg.Timeout,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "kms-plugin", JSONFormat: true, Level: hclog.Warn,
			Output: slog.NewLogLogger(p.logger.Handler(), slog.LevelWarn).Writer()}),
	})
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("start %s: %w", p.cfg.Command, err)
	}
	raw, err := rpc.Dispense(pluginName)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("dispense from %s: %w", p.cfg.Command, err)
	}
	p.client, p.service = client, raw.(kmspb.KeyServiceClient)
	p.starts++
	return p.service, nil
}
