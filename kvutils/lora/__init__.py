"""lora: LoRA adapters on the last k layers of a causal model, and switching to one mid-sequence.

families   which decoder families are supported and where their layers are
tails      a LoRA "tail" on the last k layers, its parameters, the active adapter, the invocation marker
boundary   running only the layers from a boundary on (the hidden states entering layer L-k)
schedule   the learning-rate schedules and training losses, named without torch
training   training an adapter (precision, batches, schedule, loss)
switching  the cache an adapter continues from under each policy, and the logits compared
patching   activation patching of the cache: one generic patch and small setters (TransformerLens style)
"""
