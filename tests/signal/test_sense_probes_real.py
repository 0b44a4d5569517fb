"""The sense probe on a real trained encoder (minilm-l6): the word's state at the old position
reads its sense from the continuation, well above chance after the embeddings."""
from conftest import states_of

from kvutils.studies.sense_probes import probes


def test_encoder_probe_on_a_real_model_reads_the_sense_at_the_old_position():
    ws = states_of("minilm-l6", keys=False)
    accuracy = probes.probe(ws, "cosine")["old_position_pct"]
    assert accuracy[0] == 50.0 and max(accuracy[1:]) >= 90.0
