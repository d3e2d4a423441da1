# model_yaml.sh — the small GPT-2 model file the shell tests and benches train (byte vocabulary,
# context 64, 2 layers, LayerNorm, GELU, learned positions, tied embeddings, biases). Sourced by
# tests/gen/*.sh and bench/*.sh; it defines one function and must never run anything itself.

# gpt2_yaml NAME D_MODEL N_HEADS FFN_HIDDEN [DESCRIPTION]  -> the model YAML on stdout
gpt2_yaml() {
  echo "name: $1"
  [ -n "${5:-}" ] && echo "description: $5"
  cat <<YAML
arch: gpt2
vocab_size: 256
context: 64
d_model: $2
n_layers: 2
n_heads: $3
ffn_hidden: $4
norm: layernorm
norm_eps: 1.0e-05
activation: gelu
position: learned
tied_embeddings: true
bias: true
tokenizer: byte
YAML
}
