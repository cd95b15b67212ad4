package httpapi

import (
	"fmt"
	"net/http"

	"github.com/lily-mq/lily/catalog"
)

// checkRedirect refuses, before a plan or a job is made, a redrive whose
// "to" names a queue that is not configured or does not exist on its
// transport: 400 naming the field, nothing changed, the refusal audited.
func (s *Server) checkRedirect(r *http.Request, p *principal, op string, f catalog.Filter, req redriveRequest) error {
	if req.To == "" {
		return nil
	}
	var problem string
	if _, ok := s.o.Config.Queue(req.To); !ok {
		problem = fmt.Sprintf("to %q: not a [[queue]] of the configuration: name a configured queue", req.To)
	} else if s.o.Target != nil {
		if _, err := s.o.Target(r.Context(), req.To); err != nil {
			problem = fmt.Sprintf("to %q: %v", req.To, err)
		}
	}
	if problem == "" {
		return nil
	}
	problem += "; nothing was sent or changed"
	rec := &catalog.AuditRecord{Op: op, At: s.o.Now(), Actor: p.name, Action: catalog.ActionRedrive,
		Selector: fmt.Sprintf(`{"filter":%s,"to":%q}`, f.String(), req.To), DryRun: req.DryRun, Outcome: catalog.OutcomeFailed, Detail: problem}
	if err := s.o.Store.AppendAudit(r.Context(), rec); err != nil {
		return err
	}
	return badField("to", "%s", problem)
}
