// gnn planetoid: the published GCN / GAT / GraphSAGE node-classification runs on a Planetoid split.
#include <cstdio>

#include "apps/commands.h"
#include "apps/planetoid.h"
#include "runtime/parallel.h"

namespace gnn::cli {

Command planetoid_command() {
  Command c;
  c.name = "planetoid";
  c.summary = "train GCN / GAT / GraphSAGE node classification on a Planetoid split (Cora, CiteSeer)";
  c.flags = {
      {"data", "FILE", "the split as .npz (x_indptr, x_indices, x_data, x_shape, edge_index, labels, idx_*)", "", true},
      {"model", "gcn|gat|sage", "the architecture", "gcn"},
      {"epochs", "N", "full-batch epochs", "200"},
      {"seed", "S", "seed for initialisation and dropout", "0"},
      {"lr", "X", "learning rate (default: 0.01 gcn/sage, 0.005 gat)"},
      {"weight-decay", "X", "L2 weight decay (default 5e-4; the first layer only for gcn, as PyG)"},
      {"dropout", "P", "dropout on inputs, hidden units and GAT attention (default 0.5, gat 0.6)"},
      {"value-dropout", "P",
       "gat: dropout on each layer's transformed features before aggregation (default: --dropout, as the GAT authors' "
       "code; 0 is PyG's GATConv)"},
      {"hidden", "N", "hidden units (per head for gat; default 16, gat 8)"},
      {"heads", "N", "GAT heads in the first layer", "8"},
      {"patience", "N", "GAT-paper early stopping with this patience (0: fixed --epochs, best val accuracy)", "0"},
      {"device", "cpu|cuda", "where to train (cuda: GPU 0)", "cpu"},
      kThreadsFlag,
      {"verbose", "", "print every epoch"},
      {"json", "", "print the result as one JSON object on the last line"}};
  c.details =
      "Published set-ups (Kipf & Welling 2017; Velickovic et al. 2018): 2-layer GCN, 16 hidden, dropout 0.5,\n"
      "lr 0.01, weight decay 5e-4, 200 epochs: 81.5% on Cora, 70.3% on CiteSeer. GAT 8 heads x 8 hidden,\n"
      "dropout 0.6 (on inputs, attention and, as in the authors' code, each layer's transformed features),\n"
      "lr 0.005: 83.0% and 72.5%. The test accuracy reported is the one at the epoch of best validation\n"
      "accuracy.";
  c.run = [](const Args& a) {
    PlanetoidOptions o;
    o.model = a.str("model");
    if (o.model != "gcn" && o.model != "gat" && o.model != "sage")
      throw UsageError("gnn planetoid: --model must be gcn, gat or sage, got '" + o.model + "'");
    o.epochs = a.integer("epochs", 1, 1'000'000);
    o.seed = uint64_t(a.integer("seed", 0, INT64_MAX));
    auto positive = [&](const char* flag, double lo, double hi) {
      const double v = a.number(flag);
      if (!(v >= lo && v <= hi))
        throw UsageError(detail::str_cat("gnn planetoid: --", flag, " must lie in [", lo, ", ", hi, "], got ",
                                         a.str(flag)));  // (to_string wrote 1e-12 as 0.000000)
      return v;
    };
    if (a.has("lr")) o.lr = positive("lr", 1e-12, 10);
    if (a.has("weight-decay")) o.weight_decay = positive("weight-decay", 0, 1);
    if (a.has("dropout")) o.dropout = positive("dropout", 0, 0.99);
    if (a.has("value-dropout")) o.value_dropout = positive("value-dropout", 0, 0.99);
    if (a.has("hidden")) o.hidden = a.integer("hidden", 1, 1 << 16);
    o.heads = a.integer("heads", 1, 1024);
    // GAT's own flags mean nothing to the other models: said, not ignored.
    for (const char* flag : {"heads", "value-dropout"})
      if (o.model != "gat" && a.on(flag))
        throw UsageError(std::string("gnn planetoid: --") + flag + " is a GAT flag; --model " + o.model +
                         " has no heads or attention");
    o.patience = a.integer("patience", 0, 1'000'000);
    o.device = parse_device(a);
    const PlanetoidData d = load_planetoid(a.str("data"));
    std::printf("%s: %lld nodes, %lld directed edges, %lld features, %lld classes; train %lld, val %lld, test %lld\n",
                d.path.c_str(), (long long)d.graph.num_nodes, (long long)d.graph.num_edges, (long long)d.x.size(1),
                (long long)d.classes, (long long)d.train.numel(), (long long)d.val.numel(), (long long)d.test.numel());
    const bool verbose = a.on("verbose");
    const PlanetoidResult r = train_planetoid(d, o, [&](const PlanetoidEpoch& e) {
      if (verbose || e.epoch % 50 == 0 || e.epoch == o.epochs)
        std::printf("epoch %4lld  loss %.4f  train %.3f  val %.3f (loss %.4f)  test %.3f\n", (long long)e.epoch, e.loss,
                    e.train_acc, e.val_acc, e.val_loss, e.test_acc);
    });
    std::printf("%s, seed %llu: best val %.4f at epoch %lld, test %.4f (%lld parameters, %.2f s)\n", o.model.c_str(),
                (unsigned long long)o.seed, r.val_acc, (long long)r.best_epoch, r.test_acc, (long long)r.parameters,
                r.seconds);
    if (a.on("json"))
      std::printf(
          "{\"model\": \"%s\", \"data\": \"%s\", \"seed\": %llu, \"epochs\": %lld, \"epochs_run\": %lld, "
          "\"best_epoch\": %lld, "
          "\"train_accuracy\": %.6f, \"val_accuracy\": %.6f, \"test_accuracy\": %.6f, \"seconds\": %.3f}\n",
          o.model.c_str(), d.path.c_str(), (unsigned long long)o.seed, (long long)o.epochs, (long long)r.epochs_run,
          (long long)r.best_epoch, r.train_acc, r.val_acc, r.test_acc, r.seconds);
    return 0;
  };
  return c;
}

}  // namespace gnn::cli
