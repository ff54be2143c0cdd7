package localstack

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
)

// checkPortsFree binds every port of the layout once before any child starts, so a port taken by another
// program is reported at once, naming it, instead of as a child that restarts until it gives up.
func (s *Stack) checkPortsFree() error {
	for _, child := range slices.Sorted(maps.Keys(s.plan.layout.Ports)) {
		for _, name := range slices.Sorted(maps.Keys(s.plan.layout.Ports[child])) {
			port := s.plan.layout.Ports[child][name]
			lis, err := net.Listen("tcp", net.JoinHostPort(s.cfg.Host, strconv.Itoa(port)))
			if err != nil {
				return fmt.Errorf("localstack: %s's %s port %d is not free: %w", child, name, port, err)
			}
			_ = lis.Close()
		}
	}
	return nil
}
