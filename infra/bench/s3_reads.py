"""First-pass validation throughput from S3 by reader threads per worker, on loopback.

Starts the S3 emulator (moto_server, a dev dependency) on 127.0.0.1, uploads a synthetic
dataset, optionally puts a proxy in front that holds every request for ``--delay`` seconds
(a round trip), then validates the dataset once per thread count with an empty cache.

    python infra/bench/s3_reads.py --delay 0.02 --threads 1,4,8,16
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

PROXY = """
import asyncio, sys
listen, upstream, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
async def pipe(reader, writer, wait):
    try:
        while data := await reader.read(65536):
            await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()
async def handle(reader, writer):
    up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream)
    await asyncio.gather(pipe(reader, up_writer, delay), pipe(up_reader, writer, 0))
async def main():
    async with await asyncio.start_server(handle, "127.0.0.1", listen) as server:
        await server.serve_forever()
asyncio.run(main())
"""


def wait_for(url: str, process: subprocess.Popen) -> None:
    for _ in range(300):
        try:
            urllib.request.urlopen(url, timeout=1)  # noqa: S310 - loopback only
            return
        except OSError:
            if process.poll() is not None:
                sys.exit(f"{process.args[0]} ended before answering on {url}")
            time.sleep(0.1)
    sys.exit(f"nothing answered on {url}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.0, help="seconds held per request")
    parser.add_argument("--threads", default="1,4,8", help="read threads per worker to try")
    parser.add_argument("--identities", type=int, default=25)
    args = parser.parse_args()

    import boto3

    from ffjobs.config.data import ValidationConfig
    from ffjobs.data import sources
    from ffjobs.data.synth import generate_dataset
    from ffjobs.data.validate import validate_dataset
    from ffjobs.local_ranks import free_loopback_port

    moto = Path(sys.executable).with_name("moto_server")
    port = free_loopback_port()
    children = [
        subprocess.Popen(
            [moto, "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    work = Path(tempfile.mkdtemp(prefix="ffjobs-s3-reads-"))
    try:
        endpoint = f"http://127.0.0.1:{port}"
        wait_for(endpoint, children[0])
        os.environ.update(
            AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
        )
        root = generate_dataset(
            work / "faces", identities=args.identities, per_identity=12, size=256, seed=0
        )
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket="bench")
        for path in sorted(root.glob("*/*.jpg")):
            client.put_object(
                Bucket="bench",
                Key=f"faces/{path.relative_to(root).as_posix()}",
                Body=path.read_bytes(),
            )
        if args.delay:
            proxy_port = free_loopback_port()
            children.append(
                subprocess.Popen(
                    [sys.executable, "-c", PROXY, str(proxy_port), str(port), str(args.delay)]
                )
            )
            endpoint = f"http://127.0.0.1:{proxy_port}"
            wait_for(endpoint, children[-1])
        for threads in (int(t) for t in args.threads.split(",")):
            sources.S3Source.read_threads = threads
            cache = work / f"cache-{threads}"
            started = time.perf_counter()
            report = validate_dataset(
                "s3://bench/faces", ValidationConfig(cache_dir=str(cache)), endpoint_url=endpoint
            )
            seconds = time.perf_counter() - started
            print(
                f"delay {args.delay * 1000:.0f} ms, {threads:2d} read threads per worker: "
                f"{report.files} files in {seconds:.2f} s = {report.files / seconds:.0f} files/s",
                flush=True,
            )
    finally:
        for child in children:
            child.terminate()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
