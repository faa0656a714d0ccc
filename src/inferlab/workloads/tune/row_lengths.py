"""The row length (prompt + output tokens: the engine's max_seq_len) a tune sample needs, so that the memory
plan is asked about the rows the candidates will run, and every candidate runs with that same length:
generate: the longest prompt in tokens plus its max_new_tokens (a line may override the default);
conformers: the length `conformers generate` derives for the sample's molecules itself."""

from __future__ import annotations

from pathlib import Path

from inferlab.errors import InputError


def generate_row_length(sample: Path, model: str, max_new_tokens: int) -> int:
    from inferlab.jsonl_io import read_jsonl_records
    from inferlab.models.tokenizer_loading import load_tokenizer
    from inferlab.types import SamplingParams
    from inferlab.workloads.text import build_request

    defaults = SamplingParams(max_new_tokens=max_new_tokens)
    tokenizer = None
    longest = 0
    for record in read_jsonl_records(sample):
        request = build_request(record, defaults)
        if isinstance(request, str):
            continue  # an error row in every candidate: it needs no room
        if request.prompt_ids is not None:
            prompt_tokens = len(request.prompt_ids)
        else:
            tokenizer = tokenizer or load_tokenizer(model)  # the engine's own tokenisation of a text prompt
            prompt_tokens = len(tokenizer(request.prompt).input_ids)
        longest = max(longest, prompt_tokens + request.sampling.max_new_tokens)
    if not longest:
        raise InputError(f"--sample {sample} has no usable prompt line; run inferlab generate on it to see why")
    return longest


def conformers_row_length(sample: Path, model: str, profile: str, num_conformers: int) -> int:
    from inferlab.models.config import read_model_spec
    from inferlab.workloads.conformers.chemistry.inputs import MoleculeFile
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.pipeline.plan import NothingDone, auto_max_seq_len, plan_molecules

    plan = plan_molecules(MoleculeFile.open(sample).records(), NothingDone(), num_conformers)
    length = auto_max_seq_len(plan.largest, get_profile(profile), read_model_spec(model).max_position_embeddings)
    if length is None:
        raise InputError(f"--sample {sample} has no usable molecule; run inferlab conformers generate on it to see why")
    return length
