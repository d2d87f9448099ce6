// A small transformer encoder used by examples/checkpoint.cpp and
// benchmarks/bench_checkpoint.cpp: token and position embeddings, a stack of
// pre-norm blocks (LayerNorm, one-head self-attention through Linear layers,
// LayerNorm, a two-layer MLP), a final LayerNorm, and an int64 buffer.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace example {

struct ModelSize {
  int64_t vocab, context, dim, hidden, blocks;
};

// "small": about 0.7 MB, for the CTest run; "100mb": 25.3 M float32
// parameters (101 MB), the size of a small language model.
inline ModelSize model_size(const std::string& name) {
  if (name == "small") return {1000, 64, 64, 256, 2};
  if (name == "100mb") return {12000, 512, 512, 2048, 6};
  throw std::invalid_argument("unknown model size '" + name + "' (small or 100mb)");
}

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t dim, int64_t hidden)
      : ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})))),
        qkv(register_module("qkv", torch::nn::Linear(dim, 3 * dim))),
        proj(register_module("proj", torch::nn::Linear(dim, dim))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})))),
        fc1(register_module("fc1", torch::nn::Linear(dim, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, dim))) {}

  at::Tensor forward(const at::Tensor& x) {
    auto qkv_out = qkv(ln1(x)).chunk(3, -1);
    const double scale = 1.0 / std::sqrt(static_cast<double>(x.size(-1)));
    at::Tensor att = at::softmax(at::matmul(qkv_out[0], qkv_out[1].transpose(-2, -1)) * scale, -1);
    at::Tensor h = x + proj(at::matmul(att, qkv_out[2]));
    return h + fc2(at::gelu(fc1(ln2(h))));
  }

  torch::nn::LayerNorm ln1;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Block);

struct TransformerImpl : torch::nn::Module {
  explicit TransformerImpl(const ModelSize& s)
      : tok(register_module("tok", torch::nn::Embedding(s.vocab, s.dim))),
        pos(register_module("pos", torch::nn::Embedding(s.context, s.dim))),
        blocks(register_module("blocks", torch::nn::ModuleList())),
        ln_f(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.dim})))) {
    for (int64_t i = 0; i < s.blocks; ++i) blocks->push_back(Block(s.dim, s.hidden));
    position_ids = register_buffer("position_ids", at::arange(s.context));
  }

  // ids: [batch, time] token ids -> [batch, time, dim]
  at::Tensor forward(const at::Tensor& ids) {
    at::Tensor x = tok(ids) + pos(position_ids.slice(0, 0, ids.size(1)));
    for (const auto& b : *blocks) x = b->as<Block>()->forward(x);
    return ln_f(x);
  }

  torch::nn::Embedding tok, pos;
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f;
  at::Tensor position_ids;
};
TORCH_MODULE(Transformer);

}  // namespace example
