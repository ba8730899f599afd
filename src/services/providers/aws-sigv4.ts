/**
 * AWS Signature Version 4 for the Bedrock kind, with AWS's own signer (`@smithy/signature-v4`,
 * the one inside the AWS SDKs) over Node's SHA-256. A request is signed over exactly the bytes
 * it sends: the caller serialises the body once and sends that text.
 *
 * Credentials are static (an access key pair, with a session token for temporary ones), read
 * once from the config or the variables it names; the signer derives and caches its signing key
 * per day, region and service, as AWS specifies.
 */
import { createHash, createHmac, type Hash, type Hmac } from "node:crypto"
import { SignatureV4 } from "@smithy/signature-v4"

type SourceData = string | ArrayBuffer | ArrayBufferView

const bytesOf = (data: SourceData): Buffer | string =>
  typeof data === "string"
    ? data
    : ArrayBuffer.isView(data)
    ? Buffer.from(data.buffer, data.byteOffset, data.byteLength)
    : Buffer.from(data)

/** SHA-256, or HMAC-SHA-256 when given a key: the hash constructor the signer expects. */
class NodeSha256 {
  readonly #secret: SourceData | undefined
  #hash: Hash | Hmac

  constructor(secret?: SourceData) {
    this.#secret = secret
    this.#hash = this.#fresh()
  }

  #fresh(): Hash | Hmac {
    return this.#secret === undefined ? createHash("sha256") : createHmac("sha256", bytesOf(this.#secret))
  }

  update(data: SourceData): void {
    this.#hash.update(bytesOf(data))
  }

  digest(): Promise<Uint8Array> {
    return Promise.resolve(new Uint8Array(this.#hash.digest()))
  }

  reset(): void {
    this.#hash = this.#fresh()
  }
}

export interface AwsCredentials {
  readonly accessKeyId: string
  readonly secretAccessKey: string
  readonly sessionToken?: string | undefined
}

export interface SigV4Signer {
  /**
   * The headers to send with a POST of `body` (already serialised) to `url`: the signed
   * `x-amz-date`, `x-amz-content-sha256`, `x-amz-security-token` (with a session token),
   * `authorization`, and the given headers, which are signed too.
   */
  readonly sign: (url: URL, body: string, headers: Readonly<Record<string, string>>) => Promise<Record<string, string>>
}

export const makeSigV4Signer = (credentials: AwsCredentials, region: string, service: string): SigV4Signer => {
  const signer = new SignatureV4({
    credentials: {
      accessKeyId: credentials.accessKeyId,
      secretAccessKey: credentials.secretAccessKey,
      ...(credentials.sessionToken === undefined ? {} : { sessionToken: credentials.sessionToken })
    },
    region,
    service,
    sha256: NodeSha256
  })
  return {
    sign: async (url, body, headers) => {
      const signed = await signer.sign({
        method: "POST",
        protocol: url.protocol,
        hostname: url.hostname,
        ...(url.port === "" ? {} : { port: Number(url.port) }),
        // The path as it travels (the model id already percent-encoded); the signer encodes it
        // once more for the canonical request, as AWS wants for every service but S3.
        path: url.pathname,
        query: {},
        headers: { ...headers, host: url.host },
        body
      })
      const { host: _, ...sent } = signed.headers
      return sent
    }
  }
}
