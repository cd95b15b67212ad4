package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/inbox"
	"github.com/lily-mq/lily/internal/sqlitedb"
)

// The demo's shop database: the order consumer records each order there
// through the inbox, in one transaction with its inbox mark, so that a
// redelivery (the worker killed after the commit, before the ack) or a
// redrive of an order already recorded is absorbed, not recorded twice.

const shopSchema = `CREATE TABLE IF NOT EXISTS demo_orders (
	event_id     TEXT    NOT NULL,
	order_id     TEXT    NOT NULL,
	amount_cents BIGINT  NOT NULL
);
CREATE TABLE IF NOT EXISTS demo_counters (
	name  TEXT   PRIMARY KEY,
	value BIGINT NOT NULL
);
INSERT INTO demo_counters (name, value) VALUES ('duplicates', 0) ON CONFLICT (name) DO NOTHING;`

// shopPath is the shop database beside the demo's SQLite file, or in
// a new temporary directory when the catalog is on PostgreSQL.
func shopPath(f Flags) (string, error) {
	if f.catalog != "" || catalog.IsPostgresURL(f.db) {
		dir, err := os.MkdirTemp("", "lily-demo-shop-")
		if err != nil {
			return "", err
		}
		return filepath.Join(dir, "shop.db"), nil
	}
	p := f.db + "-shop.db"
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		return "", usagef("--db %s: the shop database %s exists; the demo creates a new one (choose a new --db or remove it)", f.db, p)
	}
	return p, nil
}

// openShop opens (creating) the shop database. Synchronous NORMAL in
// WAL mode keeps every commit through a kill -9, the demo's failure.
func openShop(ctx context.Context, path string) (*sql.DB, error) {
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{Synchronous: "NORMAL"})
	if err != nil {
		return nil, err
	}
	if err := inbox.Migrate(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	if _, err := db.ExecContext(ctx, shopSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("demo: create the shop tables in %s: %w", path, err)
	}
	return db, nil
}

// recordOrder is the order consumer's effect, through the inbox: the
// order is recorded at most once per event ID; a duplicate is counted in
// the same transaction.
func recordOrder(ctx context.Context, shop *sql.DB, d *lily.Delivery, o Order) error {
	tx, err := shop.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	applied, err := inbox.Apply(ctx, tx, d, func() error {
		_, err := tx.ExecContext(ctx, `INSERT INTO demo_orders (event_id, order_id, amount_cents) VALUES ($1, $2, $3)`,
			d.EventID, o.OrderID, o.AmountCents)
		return err
	})
	if err != nil {
		return err
	}
	if !applied {
		if _, err := tx.ExecContext(ctx, `UPDATE demo_counters SET value = value + 1 WHERE name = 'duplicates'`); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// shopHandler runs handler's checks, then records the order through
// the inbox, then (the unfixed consumer) renders a gift note — which
// crashes the process after the order was committed, before the ack.
func shopHandler(shop *sql.DB, fixed bool) lily.HandlerFunc {
	return func(ctx context.Context, d *lily.Delivery) error {
		var o Order
		if err := json.Unmarshal(d.Body, &o); err != nil {
			return lily.Permanent(fmt.Errorf("decode order: %w", err))
		}
		if d.RetryCount < o.GatewayTimeouts {
			return fmt.Errorf("charge order %s: %w", o.OrderID, errGatewayTimeout)
		}
		if !fixed && o.SKU == HopelessSKU {
			return fmt.Errorf("reserve stock for order %s: %w", o.OrderID, &inventoryError{SKU: o.SKU})
		}
		if err := recordOrder(ctx, shop, d, o); err != nil {
			return fmt.Errorf("record order %s: %w", o.OrderID, err)
		}
		if !fixed && o.SKU == CrashSKU {
			crashWorker() // the gift-note renderer, after the commit
		}
		return nil
	}
}

// crashWorker kills the process with SIGKILL: no defer runs, like a
// segfault in native code.
func crashWorker() {
	p, _ := os.FindProcess(os.Getpid())
	_ = p.Kill()
	select {}
}

// effects is what the shop database shows after the demo.
type effects struct {
	applied, distinct, duplicates int64
}

func readShop(ctx context.Context, path string) (effects, error) {
	var e effects
	db, err := openShop(ctx, path)
	if err != nil {
		return e, err
	}
	defer db.Close()
	err = db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT event_id),
		(SELECT value FROM demo_counters WHERE name = 'duplicates') FROM demo_orders`).Scan(&e.applied, &e.distinct, &e.duplicates)
	if err != nil {
		return e, fmt.Errorf("demo: read the shop database %s: %w", path, err)
	}
	return e, nil
}
