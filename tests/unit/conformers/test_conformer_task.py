"""The conformer pipeline's typed task (pipeline/task.py) on the requests of a real RequestFeed: each
request carries its ConformerTask as metadata (row `<id>#<k>`, attempt 0), a retry is the row's next
attempt with its own request id and the earlier attempts' tokens summed, and a task survives pickling
(the prepared molecule's program included)."""

from __future__ import annotations

import pickle

from inferlab.types import SamplingParams
from inferlab.workloads.conformers.chemistry.inputs import MoleculeInput
from inferlab.workloads.conformers.chemistry.profiles import DEFAULT_PROFILE
from inferlab.workloads.conformers.pipeline.feed import MoleculeFeed, RequestFeed
from inferlab.workloads.conformers.pipeline.plan import ConformerIndices, MoleculeJob
from inferlab.workloads.conformers.pipeline.prepare import MoleculePreparer
from inferlab.workloads.conformers.pipeline.task import ConformerTask


class NoErrorRows:
    def error(self, job, message, indices=None, fields=None):
        raise AssertionError(f"unexpected error rows for {job.record.id}: {message}")


def feed_of(qwen3_chem_dir, jobs: list[MoleculeJob]) -> tuple[RequestFeed, MoleculePreparer]:
    preparer = MoleculePreparer(qwen3_chem_dir, DEFAULT_PROFILE, workers=0)
    feed = RequestFeed(MoleculeFeed(jobs, preparer, lookahead=2), max_seq_len=4096, model_positions=4096,
                       sampling=SamplingParams(temperature=1.0), rows=NoErrorRows())
    return feed, preparer


def test_requests_carry_their_task_and_a_retry_is_the_next_attempt(qwen3_chem_dir):
    ethanol = MoleculeJob(MoleculeInput(1, "eth", "CCO"), ConformerIndices(3, frozenset({1})))
    water = MoleculeJob(MoleculeInput(2, "w", "O"), ConformerIndices(1))
    feed, preparer = feed_of(qwen3_chem_dir, [ethanol, water])
    with preparer:
        requests = list(feed.requests())
        assert [r.id for r in requests] == ["eth#0", "eth#2", "w#0"]
        tasks = [r.metadata for r in requests]
        assert all(isinstance(t, ConformerTask) for t in tasks)
        assert [(t.job, t.k, t.attempt, t.earlier_tokens) for t in tasks] == [
            (ethanol, 0, 0, 0), (ethanol, 2, 0, 0), (water, 0, 0, 0)]
        assert requests[0].prompt_ids == tasks[0].molecule.prompt_ids
        assert requests[0].constraint is tasks[0].molecule.program
        assert tasks[0].molecule.template.canonical_smiles == "CCO"

        feed.retry(tasks[1], output_tokens=40)
        assert feed.has_work
        (first_retry,) = feed.requests()
        assert first_retry.id == "eth#2@retry1"
        assert (first_retry.metadata.k, first_retry.metadata.attempt, first_retry.metadata.earlier_tokens) == (2, 1, 40)
        assert first_retry.metadata.row_id == "eth#2"
        feed.retry(first_retry.metadata, output_tokens=35)
        (second_retry,) = feed.requests()
        assert second_retry.id == "eth#2@retry2"
        assert (second_retry.metadata.attempt, second_retry.metadata.earlier_tokens) == (2, 75)
        assert not feed.has_work


def test_a_task_survives_pickling(qwen3_chem_dir):
    job = MoleculeJob(MoleculeInput(1, "eth", "CCO"), ConformerIndices(1))
    feed, preparer = feed_of(qwen3_chem_dir, [job])
    with preparer:
        (request,) = feed.requests()
    task = request.metadata.retried(12)
    back = pickle.loads(pickle.dumps(task))
    assert (back.job, back.k, back.attempt, back.earlier_tokens, back.request_id) == (job, 0, 1, 12, "eth#0@retry1")
    assert back.molecule.prompt_ids == task.molecule.prompt_ids
    assert back.molecule.template.canonical_smiles == "CCO"
    assert back.molecule.program.max_new_tokens == task.molecule.program.max_new_tokens
