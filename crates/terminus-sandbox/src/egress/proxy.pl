# The egress proxy of a trial whose phase is `network_mode = "allowlist"` (see egress.rs).
# Core Perl only: it runs in any Debian-based image (perl-base is Essential) without a pull.
#
# It admits `CONNECT host:port` and absolute-URI `http://host[:port]/...` requests whose host
# the allowlist admits, and answers 403 to any other host:
#   `example.com`      that name exactly (any port);
#   `*.example.com`    every name under it (`a.example.com`, `a.b.example.com`), not the apex;
#   `192.0.2.1`, `2001:db8::1`, `10.0.0.0/8`, `2001:db8::/32`
#                      the addresses connected to: an IP literal, or what a name resolves to.
# The allowlist is re-read for every connection from ALLOWLIST (written when a phase starts).
#
# Test mode, no network: `perl proxy.pl --match ENTRY... -- HOST...` prints `allow` or `deny`
# for each HOST (names by the name rules, IP literals by the address rules).
use strict;
use warnings;
use IO::Select;
use IO::Socket::IP;
use Socket qw(AF_INET AF_INET6 SOCK_STREAM inet_pton getaddrinfo unpack_sockaddr_in unpack_sockaddr_in6);

my $ALLOWLIST = '/etc/terminus-egress/allowed';
my $PORT = 3128;
my $MAX_HEAD = 65536;

sub pack_ip {
    my ($text) = @_;
    my $v4 = inet_pton(AF_INET, $text);
    return $v4 if defined $v4;
    return $text =~ /:/ ? inet_pton(AF_INET6, $text) : undef;
}

# An IPv4 address written as IPv6 (`::ffff:a.b.c.d`) is matched as IPv4.
sub unmap {
    my ($packed) = @_;
    return length($packed) == 16 && substr($packed, 0, 12) eq ("\0" x 10) . "\xff\xff" ? substr($packed, 12) : $packed;
}

sub rules {
    my (@entries) = @_;
    my $rules = { exact => {}, suffix => [], nets => [] };
    for my $entry (@entries) {
        $entry = lc $entry;
        $entry =~ s/\s+//g;
        next unless length $entry;
        if ($entry =~ m{^(.+)/(\d+)$}) {
            my $net = pack_ip($1);
            push @{ $rules->{nets} }, [unmap($net), $2 - (length($net) == 16 && length(unmap($net)) == 4 ? 96 : 0)]
                if defined $net && $2 <= 8 * length $net;
        } elsif (defined(my $ip = pack_ip($entry))) {
            $ip = unmap($ip);
            push @{ $rules->{nets} }, [$ip, 8 * length $ip];
        } elsif ($entry =~ /^\*(\..+)$/) {
            push @{ $rules->{suffix} }, $1;
        } else {
            $rules->{exact}{$entry} = 1;
        }
    }
    return $rules;
}

sub load_rules {
    open(my $f, '<', $ALLOWLIST) or return rules();
    my @lines = <$f>;
    close $f;
    return rules(@lines);
}

sub name_allowed {
    my ($rules, $host) = @_;
    return 1 if $rules->{exact}{$host};
    for my $suffix (@{ $rules->{suffix} }) {
        return 1 if length($host) > length($suffix) && substr($host, -length $suffix) eq $suffix;
    }
    return 0;
}

sub address_allowed {
    my ($rules, $packed) = @_;
    $packed = unmap($packed);
    for my $net (@{ $rules->{nets} }) {
        my ($base, $bits) = @$net;
        next unless length($base) == length($packed) && $bits >= 0;
        my $mask = pack('B*', ('1' x $bits) . ('0' x (8 * length($base) - $bits)));
        return 1 if ($packed & $mask) eq ($base & $mask);
    }
    return 0;
}

sub normal_host {
    my ($host) = @_;
    $host = lc $host;
    $host =~ s/^\[(.*)\]$/$1/;
    $host =~ s/\.$//;
    return $host;
}

if (@ARGV && $ARGV[0] eq '--match') {
    shift @ARGV;
    my @entries;
    push @entries, shift @ARGV while @ARGV && $ARGV[0] ne '--';
    shift @ARGV;
    my $rules = rules(@entries);
    for my $host (map { normal_host($_) } @ARGV) {
        my $ip = pack_ip($host);
        my $ok = defined $ip ? address_allowed($rules, $ip) : name_allowed($rules, $host);
        print $ok ? "allow\n" : "deny\n";
    }
    exit 0;
}

sub reply {
    my ($client, $status, $text) = @_;
    my $body = "terminus egress proxy: $text\n";
    syswrite($client, "HTTP/1.1 $status\r\nContent-Type: text/plain\r\nContent-Length: " . length($body)
        . "\r\nConnection: close\r\n\r\n$body");
    exit 0;
}

# The addresses of `host` this phase may reach (`getaddrinfo` results), or why not.
sub targets {
    my ($rules, $host, $port) = @_;
    my $by_name = name_allowed($rules, $host);
    return (undef, "403 Forbidden", "`$host` is not in this phase's allowed_hosts")
        unless $by_name || @{ $rules->{nets} };
    my ($err, @found) = getaddrinfo($host, $port, { socktype => SOCK_STREAM });
    if ($err || !@found) {
        return (undef, "502 Bad Gateway", "cannot resolve `$host`") if $by_name;
        return (undef, "403 Forbidden", "`$host` is not in this phase's allowed_hosts");
    }
    my @allowed = grep {
        my $ip = $_->{family} == AF_INET6 ? (unpack_sockaddr_in6($_->{addr}))[1] : (unpack_sockaddr_in($_->{addr}))[1];
        $by_name || address_allowed($rules, $ip)
    } grep { $_->{family} == AF_INET || $_->{family} == AF_INET6 } @found;
    return (undef, "403 Forbidden", "`$host` is not in this phase's allowed_hosts") unless @allowed;
    return (\@allowed);
}

sub relay {
    my ($one, $other) = @_;
    my %peer = ("$one" => $other, "$other" => $one);
    my $select = IO::Select->new($one, $other);
    while ($select->count) {
        for my $from ($select->can_read) {
            my $to = $peer{"$from"};
            my $n = sysread($from, my $data, 65536);
            if (!$n) {
                $select->remove($from);
                shutdown($to, 1);
                next;
            }
            my $done = 0;
            while ($done < $n) {
                my $wrote = syswrite($to, $data, $n - $done, $done);
                return unless defined $wrote;
                $done += $wrote;
            }
        }
    }
}

sub handle {
    my ($client) = @_;
    local $SIG{ALRM} = sub { exit 0 };
    alarm 30;
    my $buffer = '';
    until ($buffer =~ /\r?\n\r?\n/) {
        my $n = sysread($client, $buffer, 8192, length $buffer);
        exit 0 unless $n;
        reply($client, "431 Request Header Fields Too Large", "request head too large") if length $buffer > $MAX_HEAD;
    }
    $buffer =~ /\r?\n\r?\n/;
    my ($head, $rest) = (substr($buffer, 0, $-[0]), substr($buffer, $+[0]));
    my @lines = split /\r?\n/, $head;
    my ($method, $target, $version) = (shift(@lines) // '') =~ m{^(\S+) (\S+) (HTTP/1\.[01])$}
        or reply($client, "400 Bad Request", "malformed request line");
    my ($host, $port, $path);
    if (uc $method eq 'CONNECT') {
        ($host, $port) = $target =~ m{^(\[[^\]/]+\]|[^:\[\]/]+):(\d+)$}
            or reply($client, "400 Bad Request", "CONNECT needs host:port");
    } elsif ($target =~ m{^http://(\[[^\]/]+\]|[^/:?#\[\]@]+)(?::(\d+))?([/?].*)?$}i) {
        ($host, $port, $path) = ($1, $2 // 80, $3 // '/');
        $path = "/$path" if $path =~ /^\?/;
    } else {
        reply($client, "400 Bad Request", "only CONNECT and absolute http:// requests are proxied");
    }
    $host = normal_host($host);
    reply($client, "400 Bad Request", "bad port") unless $port >= 1 && $port <= 65535;
    my ($allowed, $status, $why) = targets(load_rules(), $host, $port);
    reply($client, $status, $why) unless $allowed;
    my $upstream;
    for my $target (@$allowed) {
        socket(my $socket, $target->{family}, SOCK_STREAM, 0) or next;
        local $SIG{ALRM} = sub { die "timeout\n" };
        alarm 10;
        my $ok = eval { connect($socket, $target->{addr}) };
        alarm 30;
        if ($ok) {
            $upstream = $socket;
            last;
        }
    }
    reply($client, "502 Bad Gateway", "cannot connect to `$host`:$port") unless $upstream;
    alarm 0;
    if (uc $method eq 'CONNECT') {
        syswrite($client, "HTTP/1.1 200 Connection established\r\n\r\n");
    } else {
        # One request per connection: the next one may name another host.
        my @headers = grep { !/^(?:proxy-connection|proxy-authorization|connection|keep-alive)\s*:/i } @lines;
        $rest = join("\r\n", "$method $path $version", @headers, "Connection: close") . "\r\n\r\n" . $rest;
    }
    syswrite($upstream, $rest) if length $rest;
    relay($client, $upstream);
    exit 0;
}

$SIG{PIPE} = 'IGNORE';
$SIG{CHLD} = 'IGNORE';
my $server = IO::Socket::IP->new(LocalHost => '0.0.0.0', LocalPort => $PORT, Listen => 128, ReuseAddr => 1)
    or die "terminus egress proxy: cannot listen on $PORT: $@\n";
while (1) {
    my $client = $server->accept or next;
    my $pid = fork;
    if (defined $pid && $pid == 0) {
        close $server;
        handle($client);
        exit 0;
    }
    close $client;
}
