"""models: naming, finding, loading and running a model; nothing here knows about cache methods.

registry   the models kvutils knows by name (embedded GGUF models, tiny random test models)
folders    a model in a local folder or an already-downloaded hub snapshot; model code refused
checks     a `models` parameter resolved and checked without loading weights
parts      a GGUF shipped in parts (qwen2.5-0.5b's six packages) joined in order, each part and the whole
checked
configs    a model's config from its config file alone (no weights, no torch)
converted  the embedded GGUF weights converted once to safetensors, in a cache verified on load
loading    load(name, dtype) -> Loaded: model and tokenizer in eval mode
install    `python -m kvutils.install`: the embedded models installed and converted (make setup)
greedy     greedy decoding with the cache and with full recomputation
layers     each layer's attention kind (full or sliding) and window, read from the config in one place
attention  the model's own attention, per layer and KV head, as the cache methods read it
rotary     moving cached keys to other positions with the model's own rotary functions
"""
