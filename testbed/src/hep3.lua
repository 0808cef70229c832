-- HEP v3 (sipcapture's "HEP3", https://github.com/sipcapture/HEP) for
-- tshark builds without a HEP dissector of their own (Debian's Wireshark
-- 4.0 has none): every generic chunk as a field, a chunk whose length is
-- not what its type takes, or that runs past the packet, flagged as
-- malformed (so `-Y _ws.malformed` finds it), and a SIP payload handed to
-- Wireshark's SIP dissector.
--
--   tshark -X lua_script:hep3.lua -d udp.port==9060,hep3 -r file.pcap
-- (testbed::hep::hep_args gives these arguments).
local hep = Proto("hep3", "Homer Encapsulation Protocol v3")
local f = hep.fields
f.length = ProtoField.uint16("hep3.length", "Length")
f.family = ProtoField.uint8("hep3.ip_family", "IP family")
f.ip_proto = ProtoField.uint8("hep3.ip_proto", "IP protocol")
f.src4 = ProtoField.ipv4("hep3.src_ip", "Source address")
f.dst4 = ProtoField.ipv4("hep3.dst_ip", "Destination address")
f.src6 = ProtoField.ipv6("hep3.src_ip6", "Source address (IPv6)")
f.dst6 = ProtoField.ipv6("hep3.dst_ip6", "Destination address (IPv6)")
f.src_port = ProtoField.uint16("hep3.src_port", "Source port")
f.dst_port = ProtoField.uint16("hep3.dst_port", "Destination port")
f.ts_sec = ProtoField.uint32("hep3.ts_sec", "Timestamp (s)")
f.ts_usec = ProtoField.uint32("hep3.ts_usec", "Timestamp (µs)")
f.proto_type = ProtoField.uint8("hep3.proto_type", "Protocol type")
f.agent = ProtoField.uint32("hep3.agent_id", "Capture agent id")
f.auth_key = ProtoField.string("hep3.auth_key", "Auth key")
f.payload = ProtoField.bytes("hep3.payload", "Payload")
f.correlation = ProtoField.string("hep3.correlation_id", "Correlation id")
f.unknown = ProtoField.uint16("hep3.unknown_chunk", "Unknown chunk type")

local malformed = ProtoExpert.new("hep3.malformed", "Malformed HEP3 packet",
    expert.group.MALFORMED, expert.severity.ERROR)
hep.experts = { malformed }

-- Fixed sizes of the fixed-size generic chunks' data.
local sizes = { [1] = 1, [2] = 1, [3] = 4, [4] = 4, [5] = 16, [6] = 16, [7] = 2,
    [8] = 2, [9] = 4, [10] = 4, [11] = 1, [12] = 4 }
local fields = { [1] = f.family, [2] = f.ip_proto, [3] = f.src4, [4] = f.dst4,
    [5] = f.src6, [6] = f.dst6, [7] = f.src_port, [8] = f.dst_port, [9] = f.ts_sec,
    [10] = f.ts_usec, [11] = f.proto_type, [12] = f.agent, [14] = f.auth_key,
    [15] = f.payload, [17] = f.correlation }

local sip = Dissector.get("sip")

function hep.dissector(buf, pinfo, tree)
    if buf:len() < 6 or buf(0, 4):string() ~= "HEP3" then
        return 0
    end
    pinfo.cols.protocol = "HEP3"
    local t = tree:add(hep, buf())
    t:add(f.length, buf(4, 2))
    if buf(4, 2):uint() ~= buf:len() then
        t:add_proto_expert_info(malformed, "length field differs from the packet's")
    end
    local pos, payload, proto_type = 6, nil, nil
    while pos < buf:len() do
        if pos + 6 > buf:len() then
            t:add_proto_expert_info(malformed, "truncated chunk header")
            return buf:len()
        end
        local vendor, kind, len = buf(pos, 2):uint(), buf(pos + 2, 2):uint(), buf(pos + 4, 2):uint()
        if len < 6 or pos + len > buf:len() then
            t:add_proto_expert_info(malformed, "chunk " .. kind .. " runs past the packet")
            return buf:len()
        end
        if vendor == 0 then
            if sizes[kind] and sizes[kind] ~= len - 6 then
                t:add_proto_expert_info(malformed, "chunk " .. kind .. " has " .. (len - 6) .. " bytes")
            elseif len > 6 and fields[kind] then
                local data = buf(pos + 6, len - 6)
                t:add(fields[kind], data)
                if kind == 11 then proto_type = data:uint() end
                if kind == 15 then payload = data end
            elseif not fields[kind] then
                t:add(f.unknown, buf(pos + 2, 2))
            end
        end
        pos = pos + len
    end
    if payload and proto_type == 1 then
        sip:call(payload:tvb(), pinfo, tree)
    end
    return buf:len()
end

DissectorTable.get("udp.port"):add_for_decode_as(hep)
