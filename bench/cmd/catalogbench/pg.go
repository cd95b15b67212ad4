package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/lily-mq/lily/catalog"
)

// freshSchema creates a new schema on the PostgreSQL server of base (a
// postgres:// URL) and returns a URL whose connections use it
// (search_path), and a drop function that removes the schema with
// everything in it.
func freshSchema(ctx context.Context, base string) (string, func() error, error) {
	db, err := sql.Open("pgx", base)
	if err != nil {
		return "", nil, fmt.Errorf("-catalog %s: %w", base, err)
	}
	var b [4]byte
	rand.Read(b[:])
	schema := fmt.Sprintf("catalogbench_%d_%s", time.Now().Unix(), hex.EncodeToString(b[:]))
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		db.Close()
		return "", nil, fmt.Errorf("-catalog: create schema %s: %w (is PostgreSQL running at %s?)", schema, err, base)
	}
	drop := func() error {
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if _, err := db.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			return fmt.Errorf("drop schema %s: %w", schema, err)
		}
		return nil
	}
	u, err := url.Parse(base)
	if err != nil {
		drop()
		return "", nil, fmt.Errorf("-catalog %s: %w", base, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}

// catalogSize returns the bytes the catalog takes: the SQLite file, or on
// PostgreSQL the tables of the current schema with their indexes and TOAST.
func catalogSize(ctx context.Context, s *catalog.Store, where string) int64 {
	if s.Kind() != "postgres" {
		if fi, err := os.Stat(where); err == nil {
			return fi.Size()
		}
		return 0
	}
	var n int64
	s.DB().QueryRowContext(ctx, `SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)
		FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
		WHERE ns.nspname = current_schema() AND c.relkind = 'r'`).Scan(&n)
	return n
}

// vacuum runs VACUUM (ANALYZE) on the entries table of a PostgreSQL
// catalog: the state autovacuum leaves a table in some time after a bulk
// load (visibility map set, so index-only scans read no heap; planner
// statistics current).
func vacuum(ctx context.Context, s *catalog.Store) (time.Duration, error) {
	start := time.Now()
	if _, err := s.DB().ExecContext(ctx, `VACUUM (ANALYZE) lily_dlq_entries`); err != nil {
		return 0, fmt.Errorf("vacuum: %w", err)
	}
	return time.Since(start), nil
}
