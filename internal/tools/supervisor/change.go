package supervisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Add launches more children into a running supervisor, each after its dependencies (new or already there)
// are ready, and returns once all are running and ready. On failure it removes what it added.
func (s *Supervisor) Add(ctx context.Context, specs ...ChildSpec) error {
	s.mu.Lock()
	if !s.started || s.stopping {
		s.mu.Unlock()
		return errors.New("supervisor: Add before Start or after Stop")
	}
	existing := make([]ChildSpec, len(s.children))
	for i, c := range s.children {
		existing[i] = c.spec
	}
	if err := validateChildren(existing, specs); err != nil {
		s.mu.Unlock()
		return err
	}
	added := make([]*child, len(specs))
	for i, spec := range specs {
		added[i] = s.addLocked(spec)
	}
	s.mu.Unlock()

	if err := s.bringUpAll(ctx, added); err != nil {
		names := make([]string, len(specs))
		for i, spec := range specs {
			names[i] = spec.Name
		}
		if removeErr := s.Remove(context.WithoutCancel(ctx), names...); removeErr != nil {
			s.log.Error("remove after failed add", "err", removeErr)
		}
		return err
	}
	s.writeStack()
	return nil
}

// Remove stops the named children (SIGTERM, SIGKILL after StopTimeout or when ctx ends), in the order given,
// and forgets them: they are no longer relaunched nor reported, and the children that listed them in
// DependsOn no longer do. An unknown name is refused.
func (s *Supervisor) Remove(ctx context.Context, names ...string) error {
	s.mu.Lock()
	var removed []*child
	for _, name := range names {
		c, ok := s.byName[name]
		if !ok {
			s.mu.Unlock()
			return fmt.Errorf("supervisor: remove unknown child %q", name)
		}
		removed = append(removed, c)
	}
	for _, c := range removed {
		c.retired = true
	}
	s.mu.Unlock()

	for _, c := range removed {
		s.terminate(ctx, c)
		s.log.Info("child removed", "child", c.spec.Name)
	}
	s.mu.Lock()
	s.children = slices.DeleteFunc(s.children, func(c *child) bool { return c.retired })
	for _, c := range removed {
		delete(s.byName, c.spec.Name)
	}
	for _, c := range s.children {
		c.spec.DependsOn = slices.DeleteFunc(c.spec.DependsOn, func(dep string) bool { return slices.Contains(names, dep) })
	}
	s.mu.Unlock()
	s.writeStack()
	return nil
}

// SetMeta replaces the free-form facts of the stack description (Config.Meta) and rewrites the stack file.
func (s *Supervisor) SetMeta(meta map[string]string) {
	s.mu.Lock()
	s.cfg.Meta = maps.Clone(meta)
	s.mu.Unlock()
	s.writeStack()
}

// Respec replaces the command line, environment and ports of the named children that are running (by
// spec.Name; others are ignored) for their next launch: a running process keeps the one it started with.
func (s *Supervisor) Respec(specs ...ChildSpec) {
	s.mu.Lock()
	for _, spec := range specs {
		if c, ok := s.byName[spec.Name]; ok {
			c.spec.Argv, c.spec.Env, c.spec.Ports = slices.Clone(spec.Argv), slices.Clone(spec.Env), maps.Clone(spec.Ports)
		}
	}
	s.mu.Unlock()
	s.writeStack()
}
