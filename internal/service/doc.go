// Package service assembles a running idem from a config, in one place that
// `idem serve`, `idem dev` and every test harness share: whoever starts idem
// gets the same wiring.
//
// It owns:
//
//   - connecting: the PostgreSQL pool (its size, its session settings, its
//     connect timeout) and the NATS connection (through natsconn), and, at
//     start-up, waiting for a server that cannot be reached yet instead of
//     exiting;
//   - turning the config into the objects that run: the handler's datasets,
//     the consumer's config, the streams, the dead-letter reconciler, the
//     outbox relay, the fleet entry (config version, replica name, dataset
//     definitions) and the metrics;
//   - checking at start that schema idem is current (migrating it when the
//     role may) and that every dataset can be planned;
//   - the HTTP server (/metrics, /healthz, /readyz);
//   - reloading the datasets on SIGHUP without a restart;
//   - the crash hook of test builds (build tag idemtest).
//
// Run is the entry point; Connect, Datasets, SamplePartition, ConfigVersion,
// Definitions, DiffDefinitions and StreamsConfig are what the other commands
// share with it, so that `idem validate` checks what serve will run.
//
// It must never parse flags, load a config file, choose an exit code or write
// to a terminal: that is the command line's. It holds no delivery, load or
// audit logic either: it only wires consumer, handlers, relay and audit
// together.
package service
