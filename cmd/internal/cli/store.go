package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// storeFlags are the flags of every command that reads or writes the
// catalog: --db PATH (the embedded SQLite file), --catalog URL (a
// PostgreSQL catalog), or --config FILE whose db or catalog_url names it.
type storeFlags struct {
	db      string
	catalog string
	config  string
}

func (f *storeFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.db, "db", "", "path of the embedded SQLite database (overrides the config's db)")
	cmd.Flags().StringVar(&f.catalog, "catalog", "", "PostgreSQL catalog URL, e.g. postgres://lily@db:5432/lily (overrides the config's catalog_url; instead of --db)")
	configFlag(cmd.Flags(), &f.config, "", "")
}

// loadConfig returns the configuration of --config, or an empty one.
func (f *storeFlags) loadConfig() (config.Config, error) {
	if f.config == "" {
		return config.Config{}.WithDefaults(), nil
	}
	return config.LoadConfig(f.config)
}

// catalogURL returns the PostgreSQL catalog to use, "" for the SQLite
// file: --catalog, else the config's catalog_url unless --db was given.
func (f *storeFlags) catalogURL() (string, error) {
	if f.catalog != "" {
		if f.db != "" {
			return "", usagef("--db %s and --catalog %s: pass one (--db for the embedded SQLite catalog, --catalog for a PostgreSQL one)", f.db, report.RedactedURL(f.catalog))
		}
		if !catalog.IsPostgresURL(f.catalog) {
			return "", usagef("--catalog %q: want a PostgreSQL URL such as postgres://lily@db:5432/lily (a SQLite file is --db PATH)", f.catalog)
		}
		return f.catalog, nil
	}
	if f.db != "" || f.config == "" {
		return "", nil
	}
	c, err := f.loadConfig()
	if err != nil {
		return "", err
	}
	return c.CatalogURL, nil
}

// where names the catalog for messages: the SQLite path, or the
// PostgreSQL URL without its password.
func (f *storeFlags) where() (string, error) {
	u, err := f.catalogURL()
	if err != nil || u != "" {
		return report.RedactedURL(u), err
	}
	return f.path()
}

// path resolves the database path: --db, else the config's db.
func (f *storeFlags) path() (string, error) {
	if f.db != "" {
		return f.db, nil
	}
	if f.config == "" {
		return "", usagef("no database given: pass --db PATH (the file your consumers or 'lily demo --db PATH' use), --catalog URL (PostgreSQL) or --config FILE")
	}
	c, err := f.loadConfig()
	if err != nil {
		return "", err
	}
	return c.DB, nil
}

// pathSource names where path came from, for messages: "--db PATH", or
// "db = PATH (from --config FILE)" when the configuration gave it.
func (f *storeFlags) pathSource(path string) string {
	if f.db == "" && f.config != "" {
		return fmt.Sprintf("db = %q (from --config %s)", path, f.config)
	}
	return "--db " + path
}

// newSQLiteFile returns the path of the SQLite catalog the flags name
// when that file does not exist yet (a command that creates it), else "".
func (f *storeFlags) newSQLiteFile() (string, error) {
	if u, err := f.catalogURL(); err != nil || u != "" {
		return "", err
	}
	path, err := f.path()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return path, nil
	}
	return "", nil
}

// removeSQLiteFile removes a SQLite database a failed command created,
// with its write-ahead log and shared-memory files.
func removeSQLiteFile(path string) error {
	var errs []error
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s, which the failed command created: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// openCatalog opens the catalog of the flags for a command that creates
// it if needed (ingest): PostgreSQL, or the SQLite file.
func (f *storeFlags) openCatalog(ctx context.Context) (*catalog.Store, error) {
	u, err := f.catalogURL()
	if err != nil {
		return nil, err
	}
	if u != "" {
		return catalog.OpenPostgres(ctx, u)
	}
	path, err := f.path()
	if err != nil {
		return nil, err
	}
	return catalog.Open(ctx, path)
}

// openExisting opens the catalog of the flags. On SQLite it opens the
// SQLite transport and its catalog on an existing database and never
// creates a new file (a typo would otherwise report an empty, perfectly
// balanced ledger); on PostgreSQL the transport is nil.
func (f *storeFlags) openExisting(ctx context.Context) (*sqlite.Transport, *catalog.Store, error) {
	u, err := f.catalogURL()
	if err != nil {
		return nil, nil, err
	}
	if u != "" {
		cat, err := catalog.OpenPostgres(ctx, u)
		return nil, cat, err
	}
	path, err := f.path()
	if err != nil {
		return nil, nil, err
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, usagef("%s: no such database file (give the path your consumers use, or create one with 'lily demo --db %s')", f.pathSource(path), path)
	}
	tr, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		return nil, nil, err
	}
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		tr.Close()
		return nil, nil, fmt.Errorf("open catalog in %s: %w", path, err)
	}
	return tr, cat, nil
}

// closeStore closes what openExisting opened.
func closeStore(tr *sqlite.Transport, cat *catalog.Store) {
	if cat != nil {
		cat.Close()
	}
	if tr != nil {
		tr.Close()
	}
}

// sqliteCounter is tr as the ledger's default in-flight counter: nil (no
// counter) when the catalog is not in a SQLite file.
func sqliteCounter(tr *sqlite.Transport) transport.InFlightCounter {
	if tr == nil {
		return nil
	}
	return tr
}
