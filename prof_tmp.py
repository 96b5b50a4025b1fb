import asyncio, sys, time, subprocess, os
from bench.grpc_target import OursGrpcTarget
from bench.micro import micro_server
from bench.targets import OursTarget
from bench.workload import run_level, prompts
from pathlib import Path
from app.paths import PROJECT_ROOT

async def main(proto):
    server = micro_server("smollm2", PROJECT_ROOT/"configs"/"model_repository", PROJECT_ROOT, Path("/tmp/prof"), grpc=proto=="grpc")
    t = OursGrpcTarget("smollm2", server.grpc_url, server) if proto == "grpc" else OursTarget("smollm2", None, server, 64)
    async with t:
        src = prompts("p ")
        await run_level(t.stream, 8, 2, 64, src)
        spy = subprocess.Popen([".venv/bin/py-spy", "record", "-p", str(server.pid), "-o", f"/tmp/prof/{proto}.txt", "-f", "raw", "-d", "8", "-r", "400"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.time()
        while time.time() - t0 < 9:
            await run_level(t.stream, 64, 2, 64, src)
        spy.wait()
asyncio.run(main(sys.argv[1]))
