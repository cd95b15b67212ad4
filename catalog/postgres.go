package catalog

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"github.com/lily-mq/lily/internal/catalogdb"
)

// IsPostgresURL reports whether s names a PostgreSQL catalog
// ("postgres://…" or "postgresql://…") rather than a SQLite file.
func IsPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// OpenPostgres opens the catalog in the PostgreSQL database at url
// (a libpq URL: postgres://user@host:5432/db?sslmode=disable, with any
// run-time parameter such as search_path=lily as a query parameter) and
// applies the migrations it lacks. Consumers on many hosts and several
// 'lily serve' replicas can share one such catalog.
func OpenPostgres(ctx context.Context, url string) (*Store, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("catalog: open %s: %w", redactURL(url), err)
	}
	// A fleet shares the server: a modest pool per process. A process's
	// decisions lock only their own data (docs/catalog.md); most of its
	// statements are counts and reads.
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("catalog: connect to %s: %w (is PostgreSQL running and the URL right? e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)", redactURL(url), err)
	}
	h := catalogdb.New(db, catalogdb.Postgres)
	if err := catalogdb.MigratePostgres(ctx, h); err != nil {
		db.Close()
		return nil, err
	}
	if err := catalogdb.BackfillSearch(ctx, h); err != nil {
		db.Close()
		return nil, err
	}
	return &Store{db: h, owned: true}, nil
}

// redactURL hides a password in a connection URL for error messages.
func redactURL(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return "<invalid URL>"
}
