import time
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.pipeline.judge import JudgeTask
from inferlab.workloads.conformers.pipeline.judge_pool import JudgePool

def main():
    smis=[l.split()[0] for l in open('/tmp/drug400.smi')]
    tps=[build_template(s, get_profile("v3-fixed4")) for s in smis]
    with JudgePool(2, '/tmp/mini') as pool:
        time.sleep(6)
        for B in (1, 8, 1, 8):
            label, with_template = f"batch {B}", True
            tasks=[JudgeTask(input_id=f"m{i}", conformer_index=k, attempt=0, may_retry=False, stereo_mirror=True,
                             template=tps[i] if with_template else None, profile="v3-fixed4", model_dir="/tmp/mini",
                             token_ids=tuple(range(750)), finish_reason="error", engine_error="x", prompt_tokens=30,
                             output_tokens=750, pressure={}) for i in range(400) for k in range(8)]
            c0=time.process_time(); t0=time.perf_counter(); th=time.thread_time()
            fs=[pool.submit(tasks[i:i+B]) for i in range(0, len(tasks), B)]
            th=time.thread_time()-th
            for f in fs: f.exception()
            print(f"{label}: caller thread {1e6*th/len(tasks):.0f} us/task, process CPU {1e6*(time.process_time()-c0)/len(tasks):.0f} us/task, wall {time.perf_counter()-t0:.2f} s")

if __name__ == "__main__":
    main()
