// Node classification on a Planetoid split (Cora, CiteSeer, PubMed as .npz): the published GCN, GAT and
// GraphSAGE set-ups, trained full-batch on the CPU (GCN also on a GPU). `gnn planetoid` is this plus printing.
//
// The file holds the features as CSR (x_indptr, x_indices, x_data, x_shape), edge_index [E, 2] (each
// undirected edge listed once or twice), labels, and the split's idx_train / idx_val / idx_test.
// Features are row-normalised (PyG's NormalizeFeatures) and edges made symmetric without duplicates.
#pragma once
#include <functional>
#include <string>

#include "runtime/graph.h"

namespace gnn {

struct PlanetoidData {
  std::string path;
  Tensor x;  // f32 [N, F], rows summing to 1 (or 0)
  Graph graph;  // symmetric, no duplicate edges, no self-loops (the layers add them)
  Tensor labels;  // i32 [N]; -1 for an unlabelled node (CiteSeer's 15 isolated ones), never in a split
  Tensor train, val, test;  // i32 node ids
  int64_t classes = 0;
};
PlanetoidData load_planetoid(const std::string& path);

struct PlanetoidOptions {
  std::string model = "gcn";  // gcn | gat | sage
  int64_t epochs = 200;
  uint64_t seed = 0;
  // < 0: the published value for the model (gcn: lr 0.01, hidden 16, dropout 0.5; gat: lr 0.005,
  // 8 heads x 8 hidden, dropout 0.6; sage: lr 0.01, hidden 16, dropout 0.5; weight decay 5e-4)
  double lr = -1, weight_decay = -1, dropout = -1;
  // gat: dropout on each layer's transformed features before aggregation (nn::GatOptions::value_dropout);
  // < 0: the same rate as `dropout`, as the GAT authors' released code has it (PyG's example has none)
  double value_dropout = -1;
  int64_t hidden = -1, heads = -1;
  // > 0: the GAT paper's early stopping (Velickovic et al., their released code): an epoch counts as
  // progress when validation accuracy does not fall below its best or validation loss does not rise
  // above its best; after `patience` epochs without progress training stops (or at `epochs`). The
  // result is the epoch where both were at their best together. 0: fixed epochs, best validation
  // accuracy (PyG's examples).
  int64_t patience = 0;
  // cuda: the features, graph and parameters live on GPU 0; labels and splits stay
  // on the host, and the logits are copied back each epoch for the accuracies.
  Device device = Device::cpu();
};

struct PlanetoidEpoch {
  int64_t epoch;
  double loss, train_acc, val_acc, test_acc;
  double val_loss;  // cross-entropy on the validation nodes, eval mode
};

struct PlanetoidResult {
  double train_acc = 0, val_acc = 0, test_acc = 0;  // at the epoch with the best validation accuracy
  int64_t best_epoch = 0, epochs_run = 0;
  double seconds = 0;
  int64_t parameters = 0;
};

// The test accuracy reported is the one at the epoch of best validation accuracy (the first such
// epoch), as PyG's examples report it.
PlanetoidResult train_planetoid(const PlanetoidData& data, const PlanetoidOptions& opt,
                                const std::function<void(const PlanetoidEpoch&)>& on_epoch = {});

}  // namespace gnn
