import ssh2 from "ssh2"
const { utils } = ssh2
let bad = 0
for (let i = 0; i < 20000; i++) {
  const p = utils.generateKeyPairSync("ed25519")
  const k = utils.parseKey(p.private)
  if (k instanceof Error) { bad++; if (bad < 3) console.log(k.message, p.private) }
}
console.log("bad", bad)
